//! The library's modules and the paths they import, read from src/ for the architecture
//! rules: a small lexer (comments and literals skipped), `use` trees and inline paths.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable source folder") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A path as written, with the module it is written in (inline modules included).
#[derive(Clone, Debug)]
struct Written {
    module: Vec<String>,
    segments: Vec<String>,
}

/// One `crate::`, `super::` or `self::` path (or a path into a submodule) in a file's code.
pub struct Import {
    /// As written: `super::model::Gang`.
    pub written: String,
    /// From the crate root: `["engine", "model", "Gang"]`.
    pub absolute: Vec<String>,
}

/// A file of the library as the rules see it: one module (a folder module is its `mod.rs`;
/// an inline `mod tests { .. }` belongs to its file).
pub struct SourceFile {
    /// From the crate root: `src/engine/place/mod.rs`.
    pub path: String,
    /// `["engine", "place"]`; the crate root (`src/lib.rs`) is `[]`.
    pub module: Vec<String>,
    pub lines: usize,
    /// Its functions with a body: (name, first line, lines).
    pub functions: Vec<(String, usize, usize)>,
    /// The public types it declares.
    pub types: Vec<String>,
    pub imports: Vec<Import>,
    /// Paths into other crates, as written (`tokio::spawn`, `std::time::Instant`): every use
    /// tree and inline path whose first segment is no module of this crate.
    pub external: Vec<Vec<String>>,
    /// The macros it calls (`println`, `format`), by name.
    pub macros: Vec<String>,
    /// What it re-exports (`pub use`): the name it gives, and the item's absolute path.
    reexports: HashMap<String, Vec<String>>,
}

/// The library crate: every file under src/ except `src/main.rs`, which is another crate
/// (the binary).
pub struct Crate {
    pub files: Vec<SourceFile>,
    by_module: HashMap<Vec<String>, usize>,
}

impl Crate {
    pub fn read() -> Crate {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut paths = Vec::new();
        rust_files(&root.join("src"), &mut paths);
        paths.sort();
        let mut parsed = Vec::new();
        for p in paths {
            let path = p.strip_prefix(root).expect("under the crate").to_string_lossy().replace('\\', "/");
            if path == "src/main.rs" {
                continue;
            }
            let text = std::fs::read_to_string(&p).expect("readable");
            let mut module: Vec<String> =
                path.trim_start_matches("src/").trim_end_matches(".rs").split('/').map(String::from).collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            let found = paths_in(&module, &text);
            parsed.push((path, module, text.lines().count(), functions(&text), public_types(&text), found));
        }
        let by_module: HashMap<Vec<String>, usize> =
            parsed.iter().enumerate().map(|(i, (_, module, ..))| (module.clone(), i)).collect();
        let is_module = |m: &[String]| by_module.contains_key(m);
        let files = parsed
            .into_iter()
            .map(|(path, module, lines, functions, types, found)| SourceFile {
                external: found
                    .imports
                    .iter()
                    .filter(|w| absolute(w, &is_module).is_none())
                    .map(|w| w.segments.clone())
                    .filter(|segments| segments.first().is_some_and(|s| s != "::"))
                    .chain(
                        found
                            .foreign
                            .iter()
                            .filter(|(child, _)| !is_module(child))
                            .map(|(_, segments)| segments.clone()),
                    )
                    .collect(),
                macros: found.macros,
                path,
                module,
                lines,
                functions,
                types,
                imports: found
                    .imports
                    .into_iter()
                    .filter_map(|w| {
                        let written = w.segments.join("::");
                        absolute(&w, &is_module).map(|absolute| Import { written, absolute })
                    })
                    .collect(),
                reexports: found
                    .reexports
                    .into_iter()
                    .filter_map(|(name, w)| absolute(&w, &is_module).map(|path| (name, path)))
                    .collect(),
            })
            .collect();
        Crate { files, by_module }
    }

    /// The file that defines the item at `path`: the deepest module on the path, followed
    /// through that module's `pub use` when it re-exports the next name.
    fn defining_file(&self, path: &[String]) -> Option<usize> {
        let mut path = path.to_vec();
        let mut file = None;
        // Bounded, in case re-exports name each other.
        for _ in 0..16 {
            let depth = (0..=path.len()).rev().find(|&k| self.by_module.contains_key(&path[..k]))?;
            let found = self.by_module[&path[..depth]];
            file = Some(found);
            match path.get(depth).and_then(|name| self.files[found].reexports.get(name)) {
                Some(target) => path = target.iter().chain(&path[depth + 1..]).cloned().collect(),
                None => break,
            }
        }
        file
    }

    /// Which file uses which, as (from, to, the path written in `from`), by index into
    /// `files`. A file's own submodules are left out: a parent declares and re-exports its
    /// children, so only the child's use of its parent counts.
    pub fn dependencies(&self) -> Vec<(usize, usize, String)> {
        let mut edges: BTreeMap<(usize, usize), String> = BTreeMap::new();
        for (from, file) in self.files.iter().enumerate() {
            for import in &file.imports {
                let Some(to) = self.defining_file(&import.absolute) else { continue };
                let below = self.files[to].module.starts_with(&file.module);
                if to != from && !below {
                    edges.entry((from, to)).or_insert_with(|| import.written.clone());
                }
            }
        }
        edges.into_iter().map(|((from, to), written)| (from, to, written)).collect()
    }
}

/// A written path made absolute: `crate::`, `super::`, `self::`, or the name of a
/// submodule of the writing module; `None` for a path into another crate.
fn absolute(path: &Written, is_module: &dyn Fn(&[String]) -> bool) -> Option<Vec<String>> {
    let segments = &path.segments;
    let mut out: Vec<String> = match segments.first().map(String::as_str)? {
        "crate" => segments[1..].to_vec(),
        "super" | "self" => {
            let mut out = path.module.clone();
            let mut rest = &segments[..];
            while let Some(first) = rest.first() {
                match first.as_str() {
                    "super" => {
                        out.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
            out.extend(rest.iter().cloned());
            out
        }
        first => {
            let mut child = path.module.clone();
            child.push(first.to_string());
            if !is_module(&child) {
                return None;
            }
            path.module.iter().chain(segments).cloned().collect()
        }
    };
    // `use a::b::{self}` and `use a::b::*` name the module `a::b`.
    while out.last().is_some_and(|s| s == "self" || s == "*") {
        out.pop();
    }
    Some(out)
}

/// The paths in a file's `text`, written in `module`: every `use` tree, and every inline
/// path that starts with `crate`, `super` or `self`, in code (comments and literals are
/// skipped); and the names its top-level `pub use` items re-export. An inline
/// `mod name { .. }` block moves `super` and `self` one module down.
fn paths_in(module: &[String], text: &str) -> Found {
    let tokens = tokenize(text);
    let mut imports = Vec::new();
    let mut reexports = Vec::new();
    let mut foreign = Vec::new();
    let mut macros = Vec::new();
    // Inline modules open here, with the brace depth outside each.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let written = |inline: &[(String, usize)], segments: Vec<String>| Written {
        module: module.iter().cloned().chain(inline.iter().map(|(m, _)| m.clone())).collect(),
        segments,
    };
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            Token::Ident(word) if word == "mod" => {
                if let (Some(Token::Ident(name)), Some(Token::Punct('{'))) = (tokens.get(i + 1), tokens.get(i + 2)) {
                    inline.push((name.clone(), depth));
                    depth += 1;
                    i += 3;
                    continue;
                }
            }
            Token::Ident(word) if word == "use" => {
                let public = is_public(&tokens, i);
                i += 1;
                let mut trees = Vec::new();
                use_tree(&tokens, &mut i, Vec::new(), &mut trees);
                for (segments, alias) in trees {
                    if segments.first().is_some_and(|s| s == "::") {
                        continue;
                    }
                    if public && inline.is_empty() {
                        let name = match (alias, segments.last().map(String::as_str)) {
                            (Some(alias), _) => Some(alias),
                            (None, Some("*")) | (None, None) => None,
                            (None, Some("self")) => segments.iter().rev().nth(1).cloned(),
                            (None, Some(last)) => Some(last.to_string()),
                        };
                        if let Some(name) = name {
                            reexports.push((name, written(&inline, segments.clone())));
                        }
                    }
                    imports.push(written(&inline, segments));
                }
                continue;
            }
            Token::Ident(word)
                if matches!(word.as_str(), "crate" | "super" | "self")
                    && tokens.get(i + 1) == Some(&Token::PathSep)
                    && (i == 0 || tokens[i - 1] != Token::PathSep) =>
            {
                let (segments, next) = path_at(&tokens, i);
                imports.push(written(&inline, segments));
                i = next;
                continue;
            }
            // Any other path (`tokio::spawn`, `std::time::Instant::now`): kept as written;
            // the crate's own module names are told apart when the paths are resolved.
            Token::Ident(word)
                if tokens.get(i + 1) == Some(&Token::PathSep)
                    && matches!(tokens.get(i + 2), Some(Token::Ident(_)))
                    && (i == 0 || tokens[i - 1] != Token::PathSep) =>
            {
                let (segments, next) = path_at(&tokens, i);
                let child: Vec<String> =
                    module.iter().cloned().chain(inline.iter().map(|(m, _)| m.clone())).chain([word.clone()]).collect();
                foreign.push((child, segments));
                i = next;
                continue;
            }
            Token::Ident(word) if tokens.get(i + 1) == Some(&Token::Punct('!')) => macros.push(word.clone()),
            _ => {}
        }
        i += 1;
    }
    Found { imports, reexports, foreign, macros }
}

/// The path that starts with the identifier at `tokens[i]` (`a::b::c`), and the index after it.
fn path_at(tokens: &[Token], i: usize) -> (Vec<String>, usize) {
    let mut segments = Vec::new();
    if let Some(Token::Ident(first)) = tokens.get(i) {
        segments.push(first.clone());
    }
    let mut j = i + 1;
    while let (Some(Token::PathSep), Some(Token::Ident(next))) = (tokens.get(j), tokens.get(j + 1)) {
        segments.push(next.clone());
        j += 2;
    }
    (segments, j)
}

/// What [`paths_in`] finds in one file.
struct Found {
    imports: Vec<Written>,
    reexports: Vec<(String, Written)>,
    /// Inline paths that start with a plain name, with the module that name would be if it
    /// were one of this crate's.
    foreign: Vec<(Vec<String>, Vec<String>)>,
    macros: Vec<String>,
}

/// Whether the `use` at `at` is `pub use` or `pub(..) use`.
fn is_public(tokens: &[Token], at: usize) -> bool {
    match at.checked_sub(1).map(|i| &tokens[i]) {
        Some(Token::Ident(word)) => word == "pub",
        Some(Token::Punct(')')) => {
            let open = tokens[..at].iter().rposition(|t| *t == Token::Punct('('));
            open.and_then(|o| o.checked_sub(1)).is_some_and(|p| tokens[p] == Token::Ident("pub".into()))
        }
        _ => false,
    }
}

/// Reads one use tree at `tokens[*i]` (after `use`), and the `;` that ends it, into its
/// paths with their aliases.
fn use_tree(tokens: &[Token], i: &mut usize, mut prefix: Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
    if tokens.get(*i) == Some(&Token::PathSep) {
        // `use ::name`: another crate.
        prefix.push("::".into());
        *i += 1;
    }
    loop {
        match tokens.get(*i) {
            Some(Token::Punct('{')) => {
                *i += 1;
                while let Some(token) = tokens.get(*i) {
                    match token {
                        Token::Punct('}') => {
                            *i += 1;
                            break;
                        }
                        Token::Punct(',') => *i += 1,
                        _ => {
                            let before = *i;
                            use_tree(tokens, i, prefix.clone(), out);
                            // Something no use tree holds: step over it rather than loop.
                            if *i == before {
                                *i += 1;
                            }
                        }
                    }
                }
                break;
            }
            Some(Token::Punct('*')) => {
                *i += 1;
                prefix.push("*".into());
                out.push((prefix, None));
                break;
            }
            Some(Token::Ident(segment)) => {
                prefix.push(segment.clone());
                *i += 1;
                if tokens.get(*i) == Some(&Token::PathSep) {
                    *i += 1;
                    continue;
                }
                let alias = match (tokens.get(*i), tokens.get(*i + 1)) {
                    (Some(Token::Ident(word)), Some(Token::Ident(alias))) if word == "as" => {
                        *i += 2;
                        Some(alias.clone())
                    }
                    _ => None,
                };
                out.push((prefix, alias));
                break;
            }
            _ => return,
        }
    }
    if tokens.get(*i) == Some(&Token::Punct(';')) {
        *i += 1;
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

/// The identifiers, `::` and punctuation of Rust source, without comments, string and
/// character literals, numbers or lifetimes.
fn tokenize(text: &str) -> Vec<Token> {
    tokenize_at(text).0
}

/// [`tokenize`], with the index of each token's first character.
fn tokenize_at(text: &str) -> (Vec<Token>, Vec<usize>) {
    let chars: Vec<char> = text.chars().collect();
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let mut tokens = Vec::new();
    let mut starts = Vec::new();
    let mut i = 0;
    // Skips a quoted literal whose opening quote is at `i`; returns the index after it.
    let quoted = |mut i: usize, quote: char| -> usize {
        i += 1;
        while i < chars.len() && chars[i] != quote {
            i += if chars[i] == '\\' { 2 } else { 1 };
        }
        i + 1
    };
    // Skips a raw string whose `#`s or opening quote start at `i`.
    let raw = |mut i: usize| -> usize {
        let hashes = chars[i..].iter().take_while(|&&c| c == '#').count();
        i += hashes + 1;
        while i < chars.len() {
            if chars[i] == '"' && chars[i + 1..].iter().take(hashes).filter(|&&c| c == '#').count() == hashes {
                return i + 1 + hashes;
            }
            i += 1;
        }
        i
    };
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut nesting = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    nesting += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    nesting -= 1;
                    i += 2;
                    if nesting == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            i = quoted(i, '"');
        } else if c == '\'' {
            // A character literal ('x', '\n', '"'), or a lifetime or label, skipped whole.
            if at(i + 1) == '\\' {
                i = quoted(i, '\'');
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
                while at(i).is_alphanumeric() || at(i) == '_' {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() {
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            match (word.as_str(), at(i)) {
                ("r" | "br" | "cr", '"' | '#') if at(i) == '"' || matches!(at(i + 1), '#' | '"') => i = raw(i),
                ("b" | "c", '"') => i = quoted(i, '"'),
                ("b", '\'') => i = quoted(i, '\''),
                // A raw identifier: `r#type`.
                ("r", '#') => i += 1,
                _ => {
                    tokens.push(Token::Ident(word));
                    starts.push(start);
                }
            }
        } else if c == ':' && at(i + 1) == ':' {
            tokens.push(Token::PathSep);
            starts.push(i);
            i += 2;
        } else {
            tokens.push(Token::Punct(c));
            starts.push(i);
            i += 1;
        }
    }
    (tokens, starts)
}

/// The public types `text` declares (`pub struct`, `pub enum`, `pub type`, `pub trait`),
/// by name.
pub fn public_types(text: &str) -> Vec<String> {
    let tokens = tokenize(text);
    let mut found = Vec::new();
    for window in tokens.windows(3) {
        if let [Token::Ident(public), Token::Ident(keyword), Token::Ident(name)] = window
            && public == "pub"
            && matches!(keyword.as_str(), "struct" | "enum" | "type" | "trait")
        {
            found.push(name.clone());
        }
    }
    found
}

/// Every function with a body in `text`, as (name, its first line, its lines from `fn` to
/// its closing brace); closures count as part of their function, nested functions apart.
pub fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let (tokens, starts) = tokenize_at(text);
    // The line of each character, from 1.
    let mut line_of = Vec::with_capacity(text.len());
    let mut line = 1;
    for c in text.chars() {
        line_of.push(line);
        if c == '\n' {
            line += 1;
        }
    }
    let mut found = Vec::new();
    for i in 0..tokens.len() {
        let (Token::Ident(word), Some(Token::Ident(name))) = (&tokens[i], tokens.get(i + 1)) else { continue };
        if word != "fn" {
            continue;
        }
        // The body opens at the first `{` after the signature; a `;` first is a declaration.
        let Some(open) = (i + 2..tokens.len()).find(|&j| matches!(tokens[j], Token::Punct('{' | ';'))) else {
            continue;
        };
        if tokens[open] == Token::Punct(';') {
            continue;
        }
        let mut depth = 0usize;
        for (j, token) in tokens.iter().enumerate().skip(open) {
            match token {
                Token::Punct('{') => depth += 1,
                Token::Punct('}') => {
                    depth -= 1;
                    if depth == 0 {
                        let first = line_of[starts[i]];
                        found.push((name.clone(), first, line_of[starts[j]] - first + 1));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    found
}

/// The identifiers `text` writes as a field (declared or filled in): each followed by a
/// single `:`, outside comments and strings.
pub fn fields_named(text: &str) -> std::collections::BTreeSet<String> {
    let tokens = tokenize(text);
    let mut found = std::collections::BTreeSet::new();
    for window in tokens.windows(2) {
        if let [Token::Ident(name), Token::Punct(':')] = window {
            found.insert(name.clone());
        }
    }
    found
}

/// How many times `text` writes `Result<.., String>`: a failure as bare text.
pub fn string_results(text: &str) -> usize {
    let tokens = tokenize(text);
    let mut found = 0;
    for (i, window) in tokens.windows(2).enumerate() {
        if !matches!(window, [Token::Ident(name), Token::Punct('<')] if name == "Result") {
            continue;
        }
        // The last argument at depth one, up to the matching `>`.
        let (mut depth, mut last) = (0usize, Vec::new());
        for token in &tokens[i + 1..] {
            match token {
                Token::Punct('<') => depth += 1,
                Token::Punct('>') if depth == 1 => break,
                Token::Punct('>') => depth -= 1,
                Token::Punct(',') if depth == 1 => last.clear(),
                other if depth >= 1 => last.push(other),
                _ => {}
            }
        }
        if matches!(last.as_slice(), [Token::Ident(name)] if name == "String") {
            found += 1;
        }
    }
    found
}
