//! Loom models of `hashed-timer-wheel`'s concurrent protocols live in `tests/`; this library is
//! empty. Run them with `RUSTFLAGS="--cfg loom" cargo test -p loom-tests --release`.
