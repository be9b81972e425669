//! Work in progress; see benches/README.md.

fn main() {}
