//! The map and the code agree. `ARCHITECTURE.md`'s module table lists the crate's modules bottom
//! to top with what each may import; this test reads that table and every file under `src/`
//! (walking the directory) and fails on:
//! - a module under `src/` that the table does not list, or a row naming no module;
//! - a file of a module directory (`src/wheel/slab.rs`) that its module's row does not name
//!   (`` `slab.rs` ``);
//! - a `lib.rs` whose `mod` declarations are not in the table's order;
//! - an import that points up the table, or one the importing module's row does not list;
//! - a cycle of imports between modules;
//! - a file other than `src/sync.rs` naming a concurrency primitive (`--cfg loom` would miss it);
//! - a model test under `tests/` that the map does not name, or one it names that is gone.
//!
//! An import is a path into another top-level module from non-test code: `use crate::x::..`,
//! `crate::x::..` in code, `super::` paths that leave the module, and names the crate root
//! re-exports (`crate::Timeout` is the `timeout` module's). Comments, doc examples, string
//! literals and `#[cfg(test)]` modules are not code here. The files map to modules as rustc
//! maps them: `src/x.rs` and `src/x/**` are module `x`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// One file of the crate: its path for messages (`src/timer/mod.rs`), its module path
/// (`["timer"]`; `src/timer/sleep.rs` is `["timer", "sleep"]`, `src/lib.rs` is `[]`), its text.
struct Source {
    path: String,
    module: Vec<String>,
    text: String,
}

/// A path from one top-level module into another.
#[derive(Debug, Clone)]
struct Import {
    from: String,
    to: String,
    path: String,
    line: usize,
    /// The `use` statement (or the line of code) that names the path.
    statement: String,
}

impl Import {
    fn at(&self) -> String {
        format!("{}:{}: `{}`", self.path, self.line, self.statement)
    }
}

/// A row of the module table.
#[derive(Debug)]
struct Row {
    module: String,
    /// The row's whole text, where the files of a module directory are named.
    text: String,
    /// The modules the row's last column names ("everything below" names every row above).
    may_import: BTreeSet<String>,
}

// ---------------------------------------------------------------------------------------------
// Reading the sources

/// Every `.rs` file under `dir`, in path order.
fn read_sources(root: &Path, dir: &Path, out: &mut Vec<Source>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            read_sources(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).expect("under src/");
            let mut module: Vec<String> = rel
                .iter()
                .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            out.push(Source {
                path: format!("src/{}", rel.display()),
                module,
                text: fs::read_to_string(&path).expect("a UTF-8 source file"),
            });
        }
    }
}

/// `text` with comments and the contents of string and character literals blanked out;
/// line breaks are kept, so line numbers still hold.
fn strip(text: &str) -> String {
    let mut s = Stripper {
        c: text.chars().collect(),
        i: 0,
        out: String::with_capacity(text.len()),
    };
    while s.i < s.c.len() {
        let ident_before = s.i > 0 && (s.c[s.i - 1].is_alphanumeric() || s.c[s.i - 1] == '_');
        match (s.at(0), s.at(1), s.at(2)) {
            ('/', '/', _) => s.line_comment(),
            ('/', '*', _) => s.block_comment(),
            _ if !ident_before && s.raw_string_quote().is_some() => s.raw_string(),
            ('"', _, _) => s.string(),
            // A character literal ('x', '\n', '\u{..}'); a lifetime ('a) has no closing quote.
            ('\'', '\\', _) => s.char_literal(3),
            ('\'', next, '\'') if next != '\'' => s.char_literal(2),
            (ch, _, _) => {
                s.out.push(ch);
                s.i += 1;
            }
        }
    }
    s.out
}

/// The state of [`strip`]: the text, where it is, what it has written.
struct Stripper {
    c: Vec<char>,
    i: usize,
    out: String,
}

impl Stripper {
    fn at(&self, k: usize) -> char {
        self.c.get(self.i + k).copied().unwrap_or('\0')
    }

    /// Writes a space for the character at `i` (a line break for a line break) and moves on.
    fn blank(&mut self) {
        self.out
            .push(if self.c[self.i] == '\n' { '\n' } else { ' ' });
        self.i += 1;
    }

    fn line_comment(&mut self) {
        while self.i < self.c.len() && self.c[self.i] != '\n' {
            self.i += 1;
        }
    }

    /// Block comments nest.
    fn block_comment(&mut self) {
        let mut depth = 0;
        while self.i < self.c.len() {
            match (self.at(0), self.at(1)) {
                ('/', '*') => depth += 1,
                ('*', '/') => depth -= 1,
                _ => {
                    self.blank();
                    continue;
                }
            }
            self.i += 2;
            if depth == 0 {
                return;
            }
        }
    }

    /// Where the quote of a raw string starting here is (`r"`, `r#"`, `br"`, `cr"`), and its
    /// number of hashes.
    fn raw_string_quote(&self) -> Option<(usize, usize)> {
        let mut k = self.i;
        if matches!(self.c.get(k), Some('b' | 'c')) {
            k += 1;
        }
        if self.c.get(k) != Some(&'r') {
            return None;
        }
        let hashes = self.c[k + 1..].iter().take_while(|&&ch| ch == '#').count();
        (self.c.get(k + 1 + hashes) == Some(&'"')).then_some((k + 1 + hashes, hashes))
    }

    /// No escapes: closed by a quote and as many hashes as opened it.
    fn raw_string(&mut self) {
        let (quote, hashes) = self.raw_string_quote().expect("at a raw string");
        self.out.push_str("\"\"");
        self.i = quote + 1;
        while self.i < self.c.len() {
            if self.at(0) == '"' && (1..=hashes).all(|k| self.at(k) == '#') {
                self.i += 1 + hashes;
                return;
            }
            self.blank();
        }
    }

    fn string(&mut self) {
        self.out.push('"');
        self.i += 1;
        while self.i < self.c.len() && self.at(0) != '"' {
            let escaped = self.at(0) == '\\';
            self.blank();
            if escaped && self.i < self.c.len() {
                self.blank();
            }
        }
        self.out.push('"');
        self.i += 1;
    }

    /// A character literal whose closing quote is `len` characters on, or later (`'\u{..}'`).
    fn char_literal(&mut self, len: usize) {
        self.i += len;
        while self.i < self.c.len() && self.at(0) != '\'' {
            self.i += 1;
        }
        self.out.push_str("' '");
        self.i += 1;
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

/// The tokens of stripped code that matter for paths: identifiers (keywords included), `::` and
/// single punctuation; numbers and literals are dropped.
fn tokenize(code: &str) -> Vec<Token> {
    let c: Vec<char> = code.chars().collect();
    let mut tokens = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() || ch == '"' || ch == '\'' || ch == '$' {
            i += 1;
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            if word == "r" && c.get(i) == Some(&'#') {
                i += 1; // a raw identifier: r#name is name
                continue;
            }
            tokens.push(Token {
                tok: Tok::Ident(word),
                line,
            });
        } else if ch.is_ascii_digit() {
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            tokens.push(Token {
                tok: Tok::PathSep,
                line,
            });
            i += 2;
        } else {
            tokens.push(Token {
                tok: Tok::Punct(ch),
                line,
            });
            i += 1;
        }
    }
    tokens
}

fn is_ident(t: Option<&Token>, word: &str) -> bool {
    matches!(t, Some(Token { tok: Tok::Ident(w), .. }) if w == word)
}

fn is_punct(t: Option<&Token>, ch: char) -> bool {
    matches!(t, Some(Token { tok: Tok::Punct(p), .. }) if *p == ch)
}

/// Whether the attribute whose `#` is at `i` is exactly `#[cfg(test)]`.
fn is_cfg_test(t: &[Token], i: usize) -> bool {
    is_punct(t.get(i + 1), '[')
        && is_ident(t.get(i + 2), "cfg")
        && is_punct(t.get(i + 3), '(')
        && is_ident(t.get(i + 4), "test")
        && is_punct(t.get(i + 5), ')')
        && is_punct(t.get(i + 6), ']')
}

/// The index just past the `]` closing the attribute whose `#` is at `i`.
fn skip_attribute(t: &[Token], i: usize) -> usize {
    let mut depth = 0;
    for (k, tok) in t.iter().enumerate().skip(i + 1) {
        match tok.tok {
            Tok::Punct('[') => depth += 1,
            Tok::Punct(']') => {
                depth -= 1;
                if depth == 0 {
                    return k + 1;
                }
            }
            _ => {}
        }
    }
    t.len()
}

/// If the item starting at `i` (after its attributes) is `mod name { .. }`, the index of its
/// `{`; `pub`, `pub(..)` and further attributes are skipped.
fn inline_module_brace(t: &[Token], mut i: usize) -> Option<usize> {
    loop {
        if is_punct(t.get(i), '#') {
            i = skip_attribute(t, i);
        } else if is_ident(t.get(i), "pub") {
            i += 1;
            if is_punct(t.get(i), '(') {
                while i < t.len() && !is_punct(t.get(i), ')') {
                    i += 1;
                }
                i += 1;
            }
        } else {
            break;
        }
    }
    let named = matches!(
        t.get(i + 1),
        Some(Token {
            tok: Tok::Ident(_),
            ..
        })
    );
    (is_ident(t.get(i), "mod") && named && is_punct(t.get(i + 2), '{')).then_some(i + 2)
}

/// The index of the `}` matching the `{` at `open`.
fn matching_brace(t: &[Token], open: usize) -> usize {
    let mut depth = 0;
    for (k, tok) in t.iter().enumerate().skip(open) {
        match tok.tok {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    t.len()
}

/// The first identifiers of the items of the use-tree group whose `{` is at `open`, with their
/// lines (`{shared::Shared, Timeout}` gives `shared` and `Timeout`).
fn group_heads(t: &[Token], open: usize) -> Vec<(String, usize)> {
    let close = matching_brace(t, open);
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut item_start = true;
    for tok in &t[open..close] {
        match &tok.tok {
            Tok::Punct('{') => {
                depth += 1;
                item_start = depth == 1;
            }
            Tok::Punct('}') => depth -= 1,
            Tok::Punct(',') if depth == 1 => item_start = true,
            Tok::Ident(w) if item_start && depth == 1 => {
                heads.push((w.clone(), tok.line));
                item_start = false;
            }
            _ => item_start = false,
        }
    }
    heads
}

/// What the crate root re-exports: name -> the top-level module it comes from
/// (`pub use timeout::Timeout;` gives `Timeout` -> `timeout`).
fn root_reexports(lib: &Source, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let t = tokenize(&strip(&lib.text));
    let mut names = BTreeMap::new();
    let mut depth = 0;
    let mut i = 0;
    while i < t.len() {
        match &t[i].tok {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => depth -= 1,
            Tok::Ident(w) if w == "use" && depth == 0 => {
                let end = (i..t.len())
                    .find(|&k| is_punct(t.get(k), ';'))
                    .unwrap_or(t.len());
                let mut path = &t[i + 1..end];
                if is_ident(path.first(), "crate") || is_ident(path.first(), "self") {
                    path = &path[2.min(path.len())..];
                }
                if let Some(Token {
                    tok: Tok::Ident(module),
                    ..
                }) = path.first()
                {
                    if modules.contains(module) {
                        for (k, tok) in path.iter().enumerate().skip(1) {
                            let Tok::Ident(name) = &tok.tok else { continue };
                            let leaf = !matches!(
                                path.get(k + 1),
                                Some(Token {
                                    tok: Tok::PathSep,
                                    ..
                                })
                            );
                            let renamed = is_ident(path.get(k + 1), "as");
                            if leaf && !renamed && name != "self" && name != "as" {
                                names.insert(name.clone(), module.clone());
                            }
                        }
                    }
                }
                i = end;
            }
            _ => {}
        }
        i += 1;
    }
    names
}

/// The modules the crate root declares from files (`mod x;`), in its order.
fn declared_modules(lib: &Source) -> Vec<String> {
    let t = tokenize(&strip(&lib.text));
    let mut names = Vec::new();
    let mut depth = 0;
    for (i, tok) in t.iter().enumerate() {
        match &tok.tok {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => depth -= 1,
            Tok::Ident(w) if w == "mod" && depth == 0 => {
                if let (
                    Some(Token {
                        tok: Tok::Ident(name),
                        ..
                    }),
                    true,
                ) = (t.get(i + 1), is_punct(t.get(i + 2), ';'))
                {
                    names.push(name.clone());
                }
            }
            _ => {}
        }
    }
    names
}

fn is_path_sep(t: Option<&Token>) -> bool {
    matches!(
        t,
        Some(Token {
            tok: Tok::PathSep,
            ..
        })
    )
}

/// Where a path that starts with `crate::` or `super::` leads.
enum PathStart {
    /// Into the top-level module named (a `super::` that stays below the crate root).
    Module(String),
    /// From the crate root, to these first segments (one, or the items of a group) and lines.
    Root(Vec<(String, usize)>),
    /// Above the crate root: not a path rustc accepts.
    Nowhere,
}

/// Reads the `crate::` or `super::super::..` prefix of the path at `i`, seen from the module
/// `here`; returns where the path leads and the index just past the prefix.
fn path_start(t: &[Token], mut i: usize, here: &[String]) -> (PathStart, usize) {
    // How many of `here`'s modules the path starts in: none from `crate::`.
    let mut depth = Some(0);
    if is_ident(t.get(i), "crate") {
        i += 2;
    } else {
        let mut up = 0;
        while is_ident(t.get(i), "super") && is_path_sep(t.get(i + 1)) {
            up += 1;
            i += 2;
        }
        depth = here.len().checked_sub(up);
    }
    let start = match depth {
        None => PathStart::Nowhere,
        Some(0) => PathStart::Root(match t.get(i).map(|t| &t.tok) {
            Some(Tok::Ident(name)) => vec![(name.clone(), t[i].line)],
            Some(Tok::Punct('{')) => group_heads(t, i),
            _ => Vec::new(),
        }),
        Some(_) => PathStart::Module(here[0].clone()),
    };
    (start, i)
}

/// The `use` statement that starts on line `start` (its first line, and the line of the import
/// if later), or the line of code.
fn statement(lines: &[&str], start: usize, line: usize) -> String {
    let first = lines[start - 1].trim();
    if line == start {
        first.to_string()
    } else {
        format!("{first} .. {}", lines[line - 1].trim())
    }
}

/// The imports of one file into other top-level modules.
fn imports_of(
    src: &Source,
    modules: &BTreeSet<String>,
    reexports: &BTreeMap<String, String>,
) -> Vec<Import> {
    let Some(own) = src.module.first() else {
        return Vec::new(); // the crate root: re-exports only
    };
    let lines: Vec<&str> = src.text.lines().collect();
    let t = tokenize(&strip(&src.text));
    let top_module = |name: &str| -> Option<String> {
        if modules.contains(name) {
            Some(name.to_string())
        } else {
            reexports.get(name).cloned()
        }
    };
    let mut found = Vec::new();
    // The inline modules open here, each with the brace depth inside it.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut use_line: Option<usize> = None;
    let mut i = 0;
    while i < t.len() {
        let tok = &t[i];
        match &tok.tok {
            Tok::Punct('#') if is_cfg_test(&t, i) => {
                if let Some(open) = inline_module_brace(&t, skip_attribute(&t, i)) {
                    i = matching_brace(&t, open) + 1; // a test module: not the crate's code
                    continue;
                }
            }
            Tok::Punct('{') => {
                depth += 1;
                if let (true, Some(Tok::Ident(name))) = (
                    is_ident(t.get(i.wrapping_sub(2)), "mod"),
                    t.get(i.wrapping_sub(1)).map(|t| &t.tok),
                ) {
                    inline.push((name.clone(), depth));
                }
            }
            Tok::Punct('}') => {
                if inline.last().is_some_and(|&(_, d)| d == depth) {
                    inline.pop();
                }
                depth -= 1;
            }
            Tok::Punct(';') => use_line = None,
            Tok::Ident(w) if w == "use" => use_line = Some(tok.line),
            Tok::Ident(w)
                if (w == "crate" || w == "super")
                    && is_path_sep(t.get(i + 1))
                    && !is_ident(t.get(i.wrapping_sub(1)), "in") =>
            {
                let here: Vec<String> = src
                    .module
                    .iter()
                    .chain(inline.iter().map(|(n, _)| n))
                    .cloned()
                    .collect();
                let (start, next) = path_start(&t, i, &here);
                let targets = match start {
                    PathStart::Module(m) => vec![(Some(m), tok.line)],
                    PathStart::Root(heads) => heads
                        .iter()
                        .map(|(n, line)| (top_module(n), *line))
                        .collect(),
                    PathStart::Nowhere => Vec::new(),
                };
                for (to, line) in targets {
                    let Some(to) = to.filter(|to| to != own) else {
                        continue;
                    };
                    found.push(Import {
                        from: own.clone(),
                        to,
                        path: src.path.clone(),
                        line,
                        statement: statement(&lines, use_line.unwrap_or(line), line),
                    });
                }
                // On at the path's first segment or group, which may hold more paths.
                i = next;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

// ---------------------------------------------------------------------------------------------
// Reading the map

/// The module table of `ARCHITECTURE.md`: the table whose header starts `| module |` and ends
/// `| may import |`, one row per top-level module, bottom to top.
fn module_table(markdown: &str) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let mut in_table = false;
    for line in markdown.lines() {
        let line = line.trim();
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if !line.starts_with('|') || cells.len() < 4 {
            if in_table {
                break;
            }
            continue;
        }
        if !in_table {
            in_table = cells[1] == "module" && cells[cells.len() - 2] == "may import";
            continue;
        }
        if cells[1].starts_with("---") {
            continue;
        }
        let module = backticked(cells[1])
            .first()
            .map(|m| m.trim_end_matches('/').to_string())
            .unwrap_or_else(|| cells[1].to_string());
        let last = cells[cells.len() - 2];
        let mut may_import: BTreeSet<String> = backticked(last).into_iter().collect();
        if last.contains("everything below") {
            may_import.extend(rows.iter().map(|r| r.module.clone()));
        }
        rows.push(Row {
            module,
            text: line.to_string(),
            may_import,
        });
    }
    rows
}

/// The `code spans` of a markdown cell.
fn backticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.trim_end_matches('/').to_string())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The checks

/// Every way the table and the imports disagree, one message each.
fn check(sources: &[Source], table: &[Row]) -> Vec<String> {
    let mut failures = Vec::new();
    let modules: BTreeSet<String> = sources
        .iter()
        .filter_map(|s| s.module.first().cloned())
        .collect();
    let position: BTreeMap<&str, usize> = table
        .iter()
        .enumerate()
        .map(|(k, r)| (r.module.as_str(), k))
        .collect();
    if table.is_empty() {
        failures.push(
            "ARCHITECTURE.md has no module table (a header `| module | owns | may import |`)"
                .to_string(),
        );
    }
    for m in &modules {
        if !position.contains_key(m.as_str()) {
            failures.push(format!(
                "module `{m}` (src/) is not in ARCHITECTURE.md's module table"
            ));
        }
    }
    for (k, row) in table.iter().enumerate() {
        if !modules.contains(&row.module) {
            failures.push(format!(
                "ARCHITECTURE.md's module table lists `{}`, which is no module under src/",
                row.module
            ));
        }
        for m in &row.may_import {
            if position.get(m.as_str()).is_none_or(|&p| p >= k) {
                failures.push(format!(
                    "ARCHITECTURE.md's module table lets `{}` import `{m}`, which is not a row \
                     below it",
                    row.module
                ));
            }
        }
    }
    for src in sources.iter().filter(|s| s.module.len() > 1) {
        let Some(row) = table.iter().find(|r| r.module == src.module[0]) else {
            continue; // reported above as missing from the table
        };
        // The file's path inside its module's directory: `slab.rs` for `src/wheel/slab.rs`.
        let prefix = format!("src/{}/", src.module[0]);
        let file = src.path.strip_prefix(&prefix).unwrap_or(&src.path);
        if !row.text.contains(&format!("`{file}`")) {
            failures.push(format!(
                "{}: ARCHITECTURE.md's row for `{}` does not name `{file}`",
                src.path, row.module
            ));
        }
    }
    if let Some(lib) = sources.iter().find(|s| s.module.is_empty()) {
        let declared = declared_modules(lib);
        let listed: Vec<String> = table
            .iter()
            .map(|r| r.module.clone())
            .filter(|m| declared.contains(m))
            .collect();
        if declared != listed {
            failures.push(format!(
                "src/lib.rs declares its modules in the order {declared:?}, not the order of \
                 ARCHITECTURE.md's module table {listed:?}"
            ));
        }
    }
    let reexports = sources
        .iter()
        .find(|s| s.module.is_empty())
        .map(|lib| root_reexports(lib, &modules))
        .unwrap_or_default();
    let imports: Vec<Import> = sources
        .iter()
        .flat_map(|s| imports_of(s, &modules, &reexports))
        .collect();
    for import in &imports {
        let (Some(&from), Some(&to)) = (
            position.get(import.from.as_str()),
            position.get(import.to.as_str()),
        ) else {
            continue; // reported above as missing from the table
        };
        if to > from {
            failures.push(format!(
                "{}: `{}` imports `{}`, which ARCHITECTURE.md's module table puts above it",
                import.at(),
                import.from,
                import.to
            ));
        } else if !table[from].may_import.contains(&import.to) {
            failures.push(format!(
                "{}: `{}` imports `{}`, which its row of ARCHITECTURE.md's module table does \
                 not list",
                import.at(),
                import.from,
                import.to
            ));
        }
    }
    for cycle in cycles(&imports) {
        let edges: Vec<String> = imports
            .iter()
            .filter(|i| cycle.contains(&i.from) && cycle.contains(&i.to))
            .map(|i| format!("\n    {} -> {} at {}", i.from, i.to, i.at()))
            .collect();
        failures.push(format!(
            "import cycle between {}:{}",
            cycle.iter().cloned().collect::<Vec<_>>().join(", "),
            edges.concat()
        ));
    }
    failures
}

/// The sets of modules that import each other in a circle (strongly connected components of more
/// than one module, and modules that import themselves through a path back).
fn cycles(imports: &[Import]) -> Vec<BTreeSet<String>> {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for i in imports {
        graph.entry(&i.from).or_default().insert(&i.to);
        graph.entry(&i.to).or_default();
    }
    // Two modules are in one cycle when each reaches the other.
    let reach = |start: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start];
        while let Some(m) = stack.pop() {
            for &next in &graph[m] {
                if seen.insert(next.to_string()) {
                    stack.push(next);
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&str, BTreeSet<String>> = graph.keys().map(|&m| (m, reach(m))).collect();
    let mut found: Vec<BTreeSet<String>> = Vec::new();
    for (&m, r) in &reaches {
        if !r.contains(m) || found.iter().any(|c| c.contains(m)) {
            continue;
        }
        let cycle: BTreeSet<String> = r
            .iter()
            .filter(|n| reaches[n.as_str()].contains(m))
            .cloned()
            .collect();
        found.push(cycle);
    }
    found
}

fn crate_sources() -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut sources = Vec::new();
    read_sources(&root, &root, &mut sources);
    sources
}

/// Imports point down ARCHITECTURE.md's module table, to modules each row lists, with no cycle.
#[test]
fn imports_follow_the_module_table() {
    let map = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md"))
        .expect("ARCHITECTURE.md at the crate root");
    let sources = crate_sources();
    assert!(sources.len() > 10, "src/ read: {} files", sources.len());
    // A reader that finds nothing would pass; the crate's modules do import each other.
    let modules: BTreeSet<String> = sources
        .iter()
        .filter_map(|s| s.module.first().cloned())
        .collect();
    let found: usize = sources
        .iter()
        .map(|s| imports_of(s, &modules, &BTreeMap::new()).len())
        .sum();
    assert!(found > 0, "no import between modules found under src/");
    let failures = check(&sources, &module_table(&map));
    assert!(
        failures.is_empty(),
        "ARCHITECTURE.md and src/ disagree:\n{}",
        failures.join("\n")
    );
}

/// ARCHITECTURE.md names every model test under `tests/` (`model.rs`, `*_model.rs`), and no
/// model test that is not there.
#[test]
fn the_map_names_every_model_test() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let on_disk: BTreeSet<String> = fs::read_dir(root.join("tests"))
        .expect("tests/")
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name == "model.rs" || name.ends_with("_model.rs"))
        .map(|name| format!("tests/{name}"))
        .collect();
    assert!(on_disk.len() > 5, "model tests found: {on_disk:?}");
    let named: BTreeSet<String> = map
        .split('`')
        .filter(|s| {
            s.starts_with("tests/") && (s.ends_with("/model.rs") || s.ends_with("_model.rs"))
        })
        .map(str::to_owned)
        .collect();
    assert_eq!(
        named, on_disk,
        "model tests named in ARCHITECTURE.md, against tests/"
    );
}

/// Every module but `sync` takes its concurrency primitives from `crate::sync`, or `--cfg loom`
/// would miss them. Doc examples are user code and may use std freely.
#[test]
fn only_sync_names_concurrency_primitives() {
    let forbidden = [
        "std::sync::atomic::Atomic",
        "std::sync::Mutex",
        "std::sync::Arc",
        "std::sync::{",
        "std::thread::spawn",
        "std::thread::Builder",
        "crossbeam_queue",
        "crossbeam_utils",
        "loom::",
    ];
    let mut failures = Vec::new();
    for src in crate_sources().iter().filter(|s| s.path != "src/sync.rs") {
        let code = strip(&src.text);
        // Test modules may use std: cut them out, keeping line numbers.
        let t = tokenize(&code);
        let mut test_lines = BTreeSet::new();
        for i in 0..t.len() {
            if is_punct(t.get(i), '#') && is_cfg_test(&t, i) {
                if let Some(open) = inline_module_brace(&t, skip_attribute(&t, i)) {
                    let close = matching_brace(&t, open).min(t.len() - 1);
                    test_lines.extend(t[i].line..=t[close].line);
                }
            }
        }
        for (n, line) in code.lines().enumerate() {
            let compact: String = line.chars().filter(|c| !c.is_whitespace()).collect();
            for f in forbidden {
                if !test_lines.contains(&(n + 1)) && compact.contains(f) {
                    failures.push(format!(
                        "{}:{}: `{}` names `{f}`: use crate::sync instead",
                        src.path,
                        n + 1,
                        src.text.lines().nth(n).unwrap_or("").trim()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Each test module's first and last token (`#[cfg(test)] mod .. { .. }`).
fn test_modules(t: &[Token]) -> Vec<(usize, usize)> {
    (0..t.len())
        .filter(|&i| is_punct(t.get(i), '#') && is_cfg_test(t, i))
        .filter_map(|i| inline_module_brace(t, skip_attribute(t, i)).map(|open| (i, open)))
        .map(|(i, open)| (i, matching_brace(t, open).min(t.len() - 1)))
        .collect()
}

/// The lines from the `fn` at `i` to its body's closing brace, if it has a body: the first `{`
/// outside parentheses and brackets, unless a `;` comes first (a declaration).
fn function_lines(t: &[Token], i: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (k, tok) in t.iter().enumerate().skip(i + 1) {
        match tok.tok {
            Tok::Punct('(' | '[') => depth += 1,
            Tok::Punct(')' | ']') => depth -= 1,
            Tok::Punct(';') if depth == 0 => return None,
            Tok::Punct('{') if depth == 0 => {
                let close = matching_brace(t, k).min(t.len() - 1);
                return Some(t[close].line - t[i].line + 1);
            }
            _ => {}
        }
    }
    None
}

/// Sizes a reader can hold: no file of `src/` over 400 lines before its first test module, and
/// no function outside the test modules over 40 lines, its `fn` to its closing brace.
#[test]
fn files_and_functions_stay_short() {
    let mut failures = Vec::new();
    let mut functions = 0;
    for src in crate_sources() {
        let t = tokenize(&strip(&src.text));
        let tests = test_modules(&t);
        let before = tests
            .first()
            .map_or(src.text.lines().count(), |&(i, _)| t[i].line - 1);
        if before > 400 {
            failures.push(format!("{}: {before} lines before its tests", src.path));
        }
        for i in 0..t.len() {
            let named = matches!(
                t.get(i + 1),
                Some(Token {
                    tok: Tok::Ident(_),
                    ..
                })
            );
            if !is_ident(t.get(i), "fn") || !named || tests.iter().any(|&(a, b)| a < i && i < b) {
                continue;
            }
            let Some(lines) = function_lines(&t, i) else {
                continue;
            };
            functions += 1;
            if lines > 40 {
                failures.push(format!(
                    "{}:{}: a function of {lines} lines",
                    src.path, t[i].line
                ));
            }
        }
    }
    assert!(functions > 300, "functions read: {functions}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// The check on small crates of its own: it must see what it is meant to see.

fn source(path: &str, text: &str) -> Source {
    let rel = path.trim_start_matches("src/").trim_end_matches(".rs");
    let mut module: Vec<String> = rel.split('/').map(str::to_string).collect();
    if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
        module.pop();
    }
    Source {
        path: path.to_string(),
        module,
        text: text.to_string(),
    }
}

const TABLE: &str = "\
| module | owns | may import |
|---|---|---|
| `low` | the bottom | nothing |
| `mid/` | the middle (`other.rs`) | `low` |
| `top` | the top | everything below |
";

fn fixture() -> Vec<Source> {
    vec![
        source(
            "src/lib.rs",
            "mod low;\nmod mid;\nmod top;\npub use mid::{Middle, other::Thing as Renamed};\n",
        ),
        source("src/low.rs", "pub struct Low;\n"),
        source("src/mid/mod.rs", "use crate::low::Low;\nmod other;\n"),
        source("src/mid/other.rs", "pub struct Thing;\n"),
        source("src/top.rs", "use crate::{low::Low, Middle};\n"),
    ]
}

#[test]
fn the_fixture_passes() {
    assert_eq!(
        check(&fixture(), &module_table(TABLE)),
        Vec::<String>::new()
    );
}

#[test]
fn an_upward_import_fails_with_file_line_and_use() {
    let sources = with("src/low.rs", "pub struct Low;\n\nuse crate::mid::Middle;\n");
    let failures = check(&sources, &module_table(TABLE));
    assert!(
        failures.contains(
            &"src/low.rs:3: `use crate::mid::Middle;`: `low` imports `mid`, which \
              ARCHITECTURE.md's module table puts above it"
                .to_string()
        ),
        "{failures:#?}"
    );
}

/// The fixture with the file at `path` replaced by `text`, or added.
fn with(path: &str, text: &str) -> Vec<Source> {
    let mut sources: Vec<Source> = fixture().into_iter().filter(|s| s.path != path).collect();
    sources.push(source(path, text));
    sources
}

#[test]
fn every_kind_of_path_counts() {
    let cases = [
        // A path in code, not in a `use`.
        ("src/low.rs", "fn f() { crate::top::go(); }", "top"),
        // A name the crate root re-exports, in a group spread over lines.
        ("src/low.rs", "use crate::{\n    Middle,\n};", "mid"),
        // A renamed re-export counts under its new name.
        ("src/low.rs", "fn f(_: crate::Renamed) {}", "mid"),
        // `super` from a top-level file is the crate root.
        ("src/low.rs", "use super::top::Top;", "top"),
        // `super::super` from a file in a module directory, and from an inline module.
        ("src/mid/other.rs", "use super::super::top::Top;", "top"),
        (
            "src/low.rs",
            "mod inner { use super::super::top::Top; }",
            "top",
        ),
    ];
    for (path, text, to) in cases {
        let sources = with(path, text);
        let failures = check(&sources, &module_table(TABLE));
        let from = &source(path, "").module[0];
        assert!(
            failures
                .iter()
                .any(|f| f.contains(&format!("`{from}` imports `{to}`"))),
            "{text:?}: {failures:#?}"
        );
    }
}

#[test]
fn comments_strings_and_test_modules_are_not_imports() {
    let text = r##"
// use crate::top::Top;
/* crate::top::Top /* nested */ crate::top::Top */
/// ```
/// use crate::top::Top;
/// ```
const S: &str = "crate::top::Top";
const R: &str = r#"crate::top::"Top"#;
const C: char = '"';
fn f<'a>(x: &'a str) -> &'a str { x }
mod inner { use super::Low; }
#[cfg(test)]
mod tests { use crate::top::Top; }
"##;
    let sources = with("src/low.rs", text);
    assert_eq!(check(&sources, &module_table(TABLE)), Vec::<String>::new());
}

#[test]
fn the_row_lists_what_may_be_imported() {
    let table = TABLE.replace("(`other.rs`) | `low` |", "(`other.rs`) | nothing |");
    let failures = check(&fixture(), &module_table(&table));
    assert_eq!(
        failures,
        [
            "src/mid/mod.rs:1: `use crate::low::Low;`: `mid` imports `low`, which its row of \
          ARCHITECTURE.md's module table does not list"
        ]
    );
}

#[test]
fn the_table_and_the_directory_list_the_same_modules() {
    let table = TABLE.replace(
        "| `top` | the top | everything below |\n",
        "| `gone` | | nothing |\n",
    );
    let failures = check(&fixture(), &module_table(&table));
    assert!(
        failures
            .contains(&"module `top` (src/) is not in ARCHITECTURE.md's module table".to_string()),
        "{failures:#?}"
    );
    assert!(
        failures.contains(
            &"ARCHITECTURE.md's module table lists `gone`, which is no module under src/"
                .to_string()
        ),
        "{failures:#?}"
    );
}

#[test]
fn a_file_of_a_module_directory_is_named_in_its_row() {
    let failures = check(
        &with("src/mid/new.rs", "pub struct New;\n"),
        &module_table(TABLE),
    );
    assert_eq!(
        failures,
        ["src/mid/new.rs: ARCHITECTURE.md's row for `mid` does not name `new.rs`"]
    );
}

#[test]
fn lib_declares_the_modules_in_the_table_order() {
    let sources = with(
        "src/lib.rs",
        "mod mid;\nmod low;\nmod top;\n#[cfg(loom)]\npub mod hooks {}\n",
    );
    let failures = check(&sources, &module_table(TABLE));
    assert_eq!(
        failures,
        [
            "src/lib.rs declares its modules in the order [\"mid\", \"low\", \"top\"], not the \
             order of ARCHITECTURE.md's module table [\"low\", \"mid\", \"top\"]"
        ]
    );
}

#[test]
fn a_cycle_fails() {
    // The order fails these imports too; the cycle is reported on its own.
    let table = "| module | owns | may import |\n|---|---|---|\n| `a` | | `b` |\n| `b` | | `a` |\n";
    let sources = vec![
        source("src/lib.rs", "mod a;\nmod b;\n"),
        source("src/a.rs", "use crate::b::B;\npub struct A;\n"),
        source("src/b.rs", "use crate::a::A;\npub struct B;\n"),
    ];
    let failures = check(&sources, &module_table(table));
    assert!(
        failures
            .iter()
            .any(|f| f.starts_with("import cycle between a, b:")
                && f.contains("a -> b at src/a.rs:1: `use crate::b::B;`")
                && f.contains("b -> a at src/b.rs:1: `use crate::a::A;`")),
        "{failures:#?}"
    );
}
