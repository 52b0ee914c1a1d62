//! ARCHITECTURE.md's layer list checked against the imports of `crates/folio/src`.
//!
//! The list is the fenced ```` ```layers ```` block of ARCHITECTURE.md: one line a layer,
//! top first, each line the module paths at that layer (a folder's path covers its rooms,
//! but a room named on a line of its own, `write::budget`, is its own entry); then the
//! named upward arrows, `from -> to: why`. Every module of the crate belongs to the entry
//! of the longest path that is a prefix of its own. An arrow is a path that names another
//! entry's module: a `use` (`crate::…`, `super::…`, `self::…`, a child module's name) or a
//! path in an expression or a type (`crate::readahead::window_pages_limit(…)`); code
//! under `#[cfg(test)]`, comments and string literals are not arrows.
//!
//! It fails on: a loop between entries; an arrow from an entry to one listed above it
//! that the block does not name; a named arrow the imports no longer have (the list stays
//! true); a module of no entry; an entry of no module. `planted_loop_is_found` and its
//! neighbours run the same check on small trees written for them, so that the check is
//! seen to fail where it must.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The layer list: entries by level (0 is the top) and the named upward arrows.
#[derive(Debug, Default)]
struct Layers {
    level: BTreeMap<String, usize>,
    named_up: BTreeMap<(String, String), String>,
}

/// Reads the ```` ```layers ```` block of a markdown text.
fn parse_layers(markdown: &str) -> Layers {
    let mut layers = Layers::default();
    let mut inside = false;
    let mut found = false;
    let mut line_no = 0;
    for line in markdown.lines() {
        let trimmed = line.trim();
        if !inside {
            if trimmed == "```layers" {
                assert!(!found, "ARCHITECTURE.md has one ```layers block, not two");
                inside = true;
                found = true;
            }
            continue;
        }
        if trimmed == "```" {
            inside = false;
            continue;
        }
        let text = trimmed.split('#').next().unwrap_or("").trim();
        if text.is_empty() {
            continue;
        }
        if let Some((arrow, why)) = text.split_once(':').filter(|(a, _)| a.contains("->")) {
            let (from, to) = arrow.split_once("->").unwrap();
            let why = why.trim();
            assert!(!why.is_empty(), "the named arrow `{arrow}` says why");
            layers
                .named_up
                .insert((from.trim().to_string(), to.trim().to_string()), why.into());
            continue;
        }
        for entry in text.split_whitespace() {
            let old = layers.level.insert(entry.to_string(), line_no);
            assert!(old.is_none(), "`{entry}` is listed twice in the layers");
        }
        line_no += 1;
    }
    assert!(found, "no ```layers block");
    assert!(!inside, "the ```layers block is not closed");
    layers
}

/// The text of Rust source without comments, string and character literals (each
/// replaced by a space, lines kept).
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == b'\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && (i == 0 || !is_ident(b[i - 1]))
        {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == b'"'
                    && b[j + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == b'#')
                        .count()
                        == hashes
                {
                    j += 1 + hashes;
                    break;
                }
                if b[j] == b'\n' {
                    out.push('\n');
                }
                j += 1;
            }
            out.push(' ');
            i = j;
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                if i < b.len() && b[i] == b'\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            out.push(' ');
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if b.get(i + 1) == Some(&b'\\') {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
                out.push(' ');
            } else if b.get(i + 2) == Some(&b'\'') {
                i += 3;
                out.push(' ');
            } else {
                out.push('\'');
                i += 1;
            }
        } else {
            // Multi-byte characters are copied whole.
            let ch = src[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Removes the items under `#[cfg(test)]` (a test module, a test helper) from stripped
/// source, and `pub(in path)` visibilities (not arrows).
fn without_tests(src: &str) -> String {
    let mut s = src.to_string();
    while let Some(at) = s.find("#[cfg(test)]") {
        let b = s.as_bytes();
        let mut j = at + "#[cfg(test)]".len();
        // The item ends at its first `;` before any `{`, or at the `}` closing its block
        // (a `;` inside brackets, `[u8; 4]`, ends nothing).
        let mut nested = 0i32;
        while j < b.len() && !(nested == 0 && (b[j] == b';' || b[j] == b'{')) {
            match b[j] {
                b'(' | b'[' => nested += 1,
                b')' | b']' => nested -= 1,
                _ => {}
            }
            j += 1;
        }
        if j < b.len() && b[j] == b'{' {
            let mut depth = 0;
            while j < b.len() {
                match b[j] {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        s.replace_range(at..(j + 1).min(s.len()), " ");
    }
    while let Some(at) = s.find("pub(in ") {
        let end = at + s[at..].find(')').expect("pub(in …) closes");
        s.replace_range(at..=end, "pub ");
    }
    s
}

/// The paths a `use` tree names, braces expanded: `a::{b, c::{d, e}}` is `a::b`,
/// `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    // `x as y` keeps `x`: `@` marks the rename once whitespace is gone.
    let tree: String = tree
        .replace(" as ", "@")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let Some(open) = tree.find('{') else {
        let path = tree.split('@').next().unwrap_or("");
        return vec![path.trim_end_matches("::").to_string()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').expect("a `use` brace closes")];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (k, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(expand)
        .map(|p| {
            if p == "self" {
                prefix.trim_end_matches("::").to_string()
            } else {
                format!("{prefix}{p}")
            }
        })
        .collect()
}

/// One module of the crate: its path (`""` for the crate root) and its code.
struct Module {
    path: String,
    file: PathBuf,
    code: String,
}

fn modules(src: &Path) -> Vec<Module> {
    let mut files = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut all: Vec<Module> = files
        .into_iter()
        .map(|file| {
            let rel = file.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
                parts.pop();
            }
            let code = without_tests(&strip(&fs::read_to_string(&file).unwrap()));
            Module {
                path: parts.join("::"),
                file,
                code,
            }
        })
        .collect();
    // A file that is a test module (`#[cfg(test)] mod tests;`) is left out with its
    // declaration: what is left declares only production modules.
    let declared: BTreeSet<String> = all
        .iter()
        .flat_map(|m| {
            child_mods(&m.code)
                .into_iter()
                .map(move |c| join(&m.path, &c))
        })
        .collect();
    all.retain(|m| m.path.is_empty() || declared.contains(&m.path));
    all.sort_by(|a, b| a.path.cmp(&b.path));
    all
}

fn join(base: &str, name: &str) -> String {
    if base.is_empty() {
        name.to_string()
    } else {
        format!("{base}::{name}")
    }
}

/// The modules a file declares (`mod name;`).
fn child_mods(code: &str) -> Vec<String> {
    let words: Vec<&str> = code
        .split(|c: char| c.is_whitespace() || c == ';' || c == '{' || c == '}')
        .filter(|w| !w.is_empty())
        .collect();
    let mut out = Vec::new();
    for (k, w) in words.iter().enumerate() {
        if *w == "mod" {
            if let Some(name) = words.get(k + 1) {
                // `mod name;`: the next character in the code after the name is `;`.
                out.push(name.to_string());
            }
        }
    }
    out
}

/// The re-exports of the crate root (`pub use a::b::Name;`): `Name` -> `a::b`.
fn reexports(root: &Module) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for tree in use_trees(&root.code) {
        for path in expand(&tree) {
            if let Some((module, name)) = path.rsplit_once("::") {
                map.insert(name.to_string(), module.to_string());
            }
        }
    }
    map
}

/// The trees of the `use` declarations of stripped code.
fn use_trees(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = code.as_bytes();
    let mut at = 0;
    while let Some(k) = code[at..].find("use ") {
        let start = at + k;
        at = start + 4;
        if start > 0 && is_ident(b[start - 1]) {
            continue;
        }
        let end = start + code[start..].find(';').expect("a `use` ends");
        out.push(code[start + 4..end].to_string());
    }
    out
}

/// The arrows of the crate: (from module, to module), both module paths.
fn arrows(mods: &[Module]) -> BTreeSet<(String, String)> {
    let known: BTreeSet<&str> = mods.iter().map(|m| m.path.as_str()).collect();
    let root = mods.iter().find(|m| m.path.is_empty()).expect("lib.rs");
    let reexported = reexports(root);
    // The module a path from `base` lands in: its longest prefix that is a module; a
    // name the root re-exports lands where it comes from.
    let resolve = |segments: &[&str], base: &str| -> Option<String> {
        let mut best = None;
        let mut path = base.to_string();
        for (k, seg) in segments.iter().enumerate() {
            path = join(&path, seg);
            if known.contains(path.as_str()) {
                best = Some((path.clone(), k));
            }
        }
        match best {
            Some((module, _)) => Some(module),
            None if base.is_empty() => segments
                .first()
                .and_then(|name| reexported.get(*name).cloned()),
            None => Some(base.to_string()),
        }
    };
    let mut out = BTreeSet::new();
    for m in mods.iter().filter(|m| !m.path.is_empty()) {
        let children: BTreeSet<String> = child_mods(&m.code).into_iter().collect();
        let mut paths: Vec<String> = Vec::new();
        let mut rest = m.code.clone();
        for tree in use_trees(&m.code) {
            paths.extend(expand(&tree));
            rest = rest.replacen(&format!("use {tree};"), " ", 1);
        }
        // Paths in expressions and types: `crate::…`, `super::…`.
        let b = rest.as_bytes();
        for anchor in ["crate::", "super::"] {
            let mut at = 0;
            while let Some(k) = rest[at..].find(anchor) {
                let start = at + k;
                at = start + anchor.len();
                if start > 0 && (is_ident(b[start - 1]) || b[start - 1] == b':') {
                    continue;
                }
                let end = rest[start..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                    .map_or(rest.len(), |e| start + e);
                paths.push(rest[start..end].trim_end_matches(':').to_string());
            }
        }
        for path in paths {
            let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
            let Some(first) = segments.first() else {
                continue;
            };
            let target = match *first {
                "crate" => resolve(&segments[1..], ""),
                "super" | "self" => {
                    let mut base = m.path.clone();
                    let mut k = 0;
                    while k < segments.len() && (segments[k] == "super" || segments[k] == "self") {
                        if segments[k] == "super" {
                            base = base
                                .rsplit_once("::")
                                .map_or(String::new(), |(p, _)| p.into());
                        }
                        k += 1;
                    }
                    resolve(&segments[k..], &base)
                }
                name if children.contains(name) => resolve(&segments, &m.path),
                _ => None, // std, another crate, or a name in scope
            };
            if let Some(target) = target {
                if target != m.path {
                    out.insert((m.path.clone(), target));
                }
            }
        }
    }
    out
}

/// The entry of the layer list a module belongs to: the longest listed prefix.
fn entry_of<'a>(layers: &'a Layers, module: &str) -> Option<&'a str> {
    layers
        .level
        .keys()
        .filter(|e| module == e.as_str() || module.starts_with(&format!("{e}::")))
        .max_by_key(|e| e.len())
        .map(|e| e.as_str())
}

/// Checks the crate under `src` against `layers`: the list of what is wrong, empty if
/// nothing is.
fn check(src: &Path, layers: &Layers) -> Vec<String> {
    let mods = modules(src);
    let mut wrong = Vec::new();
    let mut used = BTreeSet::new();
    for m in mods.iter().filter(|m| !m.path.is_empty()) {
        match entry_of(layers, &m.path) {
            Some(e) => {
                used.insert(e.to_string());
            }
            None => wrong.push(format!(
                "module `{}` ({}) is in no layer of ARCHITECTURE.md's list",
                m.path,
                m.file.display()
            )),
        }
    }
    for entry in layers.level.keys().filter(|e| !used.contains(*e)) {
        wrong.push(format!("layer entry `{entry}` names no module"));
    }
    // The arrows between entries, with one module arrow each as the witness.
    let mut between: BTreeMap<(String, String), (String, String)> = BTreeMap::new();
    for (from, to) in arrows(&mods) {
        let (Some(a), Some(b)) = (entry_of(layers, &from), entry_of(layers, &to)) else {
            continue;
        };
        if a != b {
            between
                .entry((a.to_string(), b.to_string()))
                .or_insert((from, to));
        }
    }
    for ((a, b), (from, to)) in &between {
        let named = layers.named_up.contains_key(&(a.clone(), b.clone()));
        if layers.level[a] > layers.level[b] && !named {
            wrong.push(format!(
                "upward arrow `{a}` -> `{b}` ({from} uses {to}) is not named in ARCHITECTURE.md"
            ));
        }
    }
    for (a, b) in layers.named_up.keys() {
        if !between.contains_key(&(a.clone(), b.clone())) {
            wrong.push(format!(
                "named arrow `{a} -> {b}` is not in the imports (any more): remove it"
            ));
        } else if layers.level.get(a) <= layers.level.get(b) {
            wrong.push(format!("named arrow `{a} -> {b}` is not upward: remove it"));
        }
    }
    // Loops: a depth-first search over the entries' graph.
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in between.keys() {
        next.entry(a).or_default().push(b);
    }
    let mut state: BTreeMap<&str, u8> = BTreeMap::new(); // 1 on the stack, 2 done
    fn visit<'a>(
        n: &'a str,
        next: &BTreeMap<&'a str, Vec<&'a str>>,
        state: &mut BTreeMap<&'a str, u8>,
        stack: &mut Vec<&'a str>,
        loops: &mut Vec<String>,
    ) {
        state.insert(n, 1);
        stack.push(n);
        for &m in next.get(n).into_iter().flatten() {
            match state.get(m) {
                Some(1) => {
                    let at = stack.iter().position(|&s| s == m).unwrap();
                    let mut cycle: Vec<&str> = stack[at..].to_vec();
                    cycle.push(m);
                    loops.push(format!("import loop: {}", cycle.join(" -> ")));
                }
                Some(_) => {}
                None => visit(m, next, state, stack, loops),
            }
        }
        stack.pop();
        state.insert(n, 2);
    }
    let mut loops = Vec::new();
    for &n in next.keys() {
        if !state.contains_key(n) {
            visit(n, &next, &mut state, &mut Vec::new(), &mut loops);
        }
    }
    wrong.extend(loops);
    wrong
}

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The check itself: folio's sources against ARCHITECTURE.md.
#[test]
fn layers_match_imports() {
    let architecture = crate_dir().join("../../ARCHITECTURE.md");
    let layers = parse_layers(&fs::read_to_string(&architecture).unwrap());
    let wrong = check(&crate_dir().join("src"), &layers);
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE.md's layer list and the imports of crates/folio/src disagree:\n  {}",
        wrong.join("\n  ")
    );
}

/// Prints the arrows between the layer list's entries (`--nocapture`), to see the graph.
#[test]
fn print_arrows() {
    let architecture = crate_dir().join("../../ARCHITECTURE.md");
    let layers = parse_layers(&fs::read_to_string(&architecture).unwrap());
    let mods = modules(&crate_dir().join("src"));
    let mut seen = BTreeSet::new();
    for (from, to) in arrows(&mods) {
        let a = entry_of(&layers, &from).unwrap_or("?");
        let b = entry_of(&layers, &to).unwrap_or("?");
        if a != b && seen.insert((a, b)) {
            println!("{a} -> {b}   ({from} -> {to})");
        }
    }
}

/// A small crate written for a test, and its layer list.
fn planted(files: &[(&str, &str)], layers: &str) -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    for (path, code) in files {
        let path = dir.path().join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, code).unwrap();
    }
    let wrong = check(dir.path(), &parse_layers(layers));
    (dir, wrong)
}

const LIB: &str = "mod a;\nmod b;\nmod c;\n";

#[test]
fn upward_arrow_is_found() {
    let (_dir, wrong) = planted(
        &[
            ("lib.rs", LIB),
            ("a.rs", "pub struct X;\n"),
            (
                "b.rs",
                "pub struct B; fn f() { crate::c::g() }\n\
                 #[cfg(test)]\nfn t(_: [u8; 4]) { let _ = crate::a::X; }\n",
            ),
            (
                "c/mod.rs",
                "mod d;\n/// crate::a::X in a comment\nfn s() { let _ = \"crate::a\"; }\n",
            ),
            (
                "c/d.rs",
                "use super::super::a; #[cfg(test)] mod tests { use crate::a::X; }\n",
            ),
        ],
        "```layers\na\nb\nc\n```\n",
    );
    // c::d -> a is an arrow up (super::super::a); b -> c is down; what the comment, the
    // string and the test module name is not an arrow.
    assert_eq!(
        wrong,
        ["upward arrow `c` -> `a` (c::d uses a) is not named in ARCHITECTURE.md"]
    );
}

#[test]
fn planted_loop_is_found() {
    let (_dir, wrong) = planted(
        &[
            ("lib.rs", LIB),
            ("a.rs", "use crate::b::B;\n"),
            ("b.rs", "use crate::{c::{self, C}};\n"),
            ("c.rs", "fn f() -> crate::a::A { todo!() }\n"),
        ],
        "```layers\na\nb\nc\nc -> a: planted\n```\n",
    );
    assert_eq!(wrong, ["import loop: a -> b -> c -> a"]);
}

#[test]
fn named_arrow_passes_and_stale_one_fails() {
    let files = [
        ("lib.rs", LIB),
        ("a.rs", ""),
        ("b.rs", "use crate::a::A;\n"),
        ("c.rs", ""),
    ];
    let (_dir, wrong) = planted(&files, "```layers\na\nb c\nb -> a: why\n```\n");
    assert!(wrong.is_empty(), "{wrong:?}");
    let (_dir, wrong) = planted(&files, "```layers\na\nb c\nb -> a: why\nc -> a: old\n```\n");
    assert_eq!(
        wrong,
        ["named arrow `c -> a` is not in the imports (any more): remove it"]
    );
}

#[test]
fn unlisted_module_fails() {
    let (_dir, wrong) = planted(
        &[("lib.rs", LIB), ("a.rs", ""), ("b.rs", ""), ("c.rs", "")],
        "```layers\na b\n```\n",
    );
    assert_eq!(wrong.len(), 1, "{wrong:?}");
    assert!(wrong[0].starts_with("module `c`"), "{wrong:?}");
}
