//! The module graph of a crate, read from its source, and the cycles in it.
//!
//! A module `a` depends on `b` when its code (tests left out) names a path into `b`: through
//! `crate::`, `super::` or `self::`, or through a child module it declares (`mod b;` then
//! `b::x`). Paths are resolved to the longest module they name, so `crate::model::plan::Plan`
//! is an edge to `model::plan`. An edge from a module to one of its own ancestors counts, so a
//! parent and a child that import from each other form a cycle, as they would for
//! `cargo modules dependencies --acyclic`.
//!
//! It reads text, not types: a path spelled only through a `use` alias of a module is seen
//! at the `use`, which is where this codebase spells them.
use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use anyhow::{Context as _, Result};

/// Module path (`model::plan`, `` for the crate root) -> the modules it depends on.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// Reads every `.rs` file below `src` (a crate's source folder) into a module graph.
pub fn read_crate(src: &Path) -> Result<Graph> {
    let mut files = BTreeMap::new();
    collect(src, src, &mut files)?;
    Ok(graph(&files))
}

fn collect(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            collect(root, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).expect("below root").with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            // The binary's root (`main.rs`) is a crate of its own, over the library.
            if parts == ["main"] {
                continue;
            }
            if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            out.insert(parts.join("::"), text);
        }
    }
    Ok(())
}

/// The graph of modules given as (module path, source text).
pub fn graph(files: &BTreeMap<String, String>) -> Graph {
    let resolve = |path: &[String]| -> Option<String> {
        (1..=path.len()).rev().map(|k| path[..k].join("::")).find(|c| files.contains_key(c))
    };
    let mut g = Graph::new();
    for (module, text) in files {
        let me: Vec<String> = if module.is_empty() { vec![] } else { module.split("::").map(String::from).collect() };
        let code = strip_tests(&strip_comments(text));
        let children = declared_children(&code);
        let mut deps = BTreeSet::new();
        for path in paths(&code) {
            let absolute: Vec<String> = match path[0].as_str() {
                "crate" => path[1..].to_vec(),
                "super" => {
                    let ups = path.iter().take_while(|p| *p == "super").count();
                    let Some(base) = me.len().checked_sub(ups) else { continue };
                    me[..base].iter().cloned().chain(path[ups..].iter().cloned()).collect()
                }
                "self" => me.iter().cloned().chain(path[1..].iter().cloned()).collect(),
                first if children.contains(first) => me.iter().cloned().chain(path.iter().cloned()).collect(),
                _ => continue,
            };
            if let Some(target) = resolve(&absolute)
                && &target != module
            {
                deps.insert(target);
            }
        }
        g.insert(module.clone(), deps);
    }
    g
}

/// The strongly connected components with more than one module (Tarjan), each sorted.
pub fn cycles(g: &Graph) -> Vec<Vec<String>> {
    struct Walk<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            for w in self.g.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    self.low.entry(v).and_modify(|l| *l = (*l).min(lw));
                } else if self.stack.contains(&w) {
                    let iw = self.index[w];
                    self.low.entry(v).and_modify(|l| *l = (*l).min(iw));
                }
            }
            if self.low[v] == self.index[v] {
                let at = self.stack.iter().rposition(|x| *x == v).expect("on the stack");
                let mut comp: Vec<String> = self.stack.drain(at..).map(String::from).collect();
                if comp.len() > 1 {
                    comp.sort();
                    self.found.push(comp);
                }
            }
        }
    }
    let mut walk = Walk { g, index: BTreeMap::new(), low: BTreeMap::new(), stack: vec![], found: vec![] };
    for v in g.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

/// The graph folded onto the top-level modules (the folders): an edge between two of them when
/// any module inside one depends on any module inside the other.
pub fn top_level(g: &Graph) -> Graph {
    let top = |m: &str| m.split("::").next().unwrap_or("").to_string();
    let mut out = Graph::new();
    for (m, deps) in g {
        let entry = out.entry(top(m)).or_default();
        entry.extend(deps.iter().map(|d| top(d)).filter(|d| *d != top(m)));
    }
    out
}

/// The edges of a folded graph that run against `layers` (lowest first): a module may import
/// only from layers before its own. A top-level module missing from `layers` is an error too,
/// so that a new folder is placed on purpose.
pub fn layer_violations(top: &Graph, layers: &[&str]) -> Vec<String> {
    let rank = |m: &str| layers.iter().position(|l| *l == m);
    let mut out = Vec::new();
    for (m, deps) in top.iter().filter(|(m, _)| !m.is_empty()) {
        let Some(mine) = rank(m) else {
            out.push(format!("module {m} is in no layer (add it to the layer list in xtask/src/lint.rs)"));
            continue;
        };
        for d in deps.iter().filter(|d| !d.is_empty()) {
            if rank(d).is_none_or(|theirs| theirs >= mine) {
                out.push(format!("{m} imports from {d}, a layer above it"));
            }
        }
    }
    out
}

/// Removes `//` and `/* */` comments (doc comments too), keeping string literals intact.
fn strip_comments(text: &str) -> String {
    let b = text.as_bytes();
    let (mut out, mut i) = (String::with_capacity(text.len()), 0);
    while i < b.len() {
        if b[i] == b'"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
            out.push_str(&text[start..i]);
        } else if text[i..].starts_with("//") {
            i = text[i..].find('\n').map_or(b.len(), |n| i + n);
        } else if text[i..].starts_with("/*") {
            i = text[i + 2..].find("*/").map_or(b.len(), |n| i + 2 + n + 2);
        } else {
            let c = text[i..].chars().next().expect("in bounds");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// Removes every `#[cfg(test)]` item (a `mod tests { .. }` or a single item).
fn strip_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        // The item ends at the `;` or the brace that closes its first `{`, whichever comes first.
        let (open, semi) = (after.find('{'), after.find(';'));
        let end = match (open, semi) {
            (Some(o), Some(s)) if s < o => s + 1,
            (Some(o), _) => matching_brace(after, o).map_or(after.len(), |c| c + 1),
            (None, Some(s)) => s + 1,
            (None, None) => after.len(),
        };
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn matching_brace(s: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in s[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Names of the child modules a file declares (`mod x;`, `pub mod x;`, `mod x { .. }`).
fn declared_children(code: &str) -> BTreeSet<String> {
    let words: Vec<&str> = code.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).collect();
    words.windows(2).filter(|w| w[0] == "mod").map(|w| w[1].to_string()).collect()
}

/// Every path in the code, with `{ .. }` groups expanded: `crate::{a::B, c}` gives
/// `crate::a::B` and `crate::c`.
fn paths(code: &str) -> Vec<Vec<String>> {
    let tokens = tokenize(code);
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let starts_path = is_ident(&tokens[i])
            && tokens.get(i + 1).is_some_and(|t| t == "::")
            && (i == 0 || (tokens[i - 1] != "::" && tokens[i - 1] != "."));
        if starts_path {
            i = expand(&tokens, i, &[], &mut out);
        } else {
            i += 1;
        }
    }
    out
}

/// Expands the path starting at `tokens[i]` under `prefix`; returns the index after it.
fn expand(tokens: &[String], mut i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    while i < tokens.len() {
        if is_ident(&tokens[i]) {
            path.push(tokens[i].clone());
            i += 1;
            if tokens.get(i).is_some_and(|t| t == "::") {
                i += 1;
                continue;
            }
            out.push(path);
            return i;
        }
        if tokens[i] == "{" {
            i += 1;
            while i < tokens.len() && tokens[i] != "}" {
                if is_ident(&tokens[i]) {
                    i = expand(tokens, i, &path, out);
                    // Skip an `as alias`.
                    if tokens.get(i).is_some_and(|t| t == "as") {
                        i += 2;
                    }
                } else {
                    i += 1;
                }
            }
            return i + 1;
        }
        break;
    }
    if !path.is_empty() {
        out.push(path);
    }
    i
}

fn is_ident(t: &str) -> bool {
    t.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Identifiers, `::`, and single punctuation characters; string literals become one token.
fn tokenize(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = code.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if !(d.is_alphanumeric() || d == '_') {
                    break;
                }
                end = j + d.len_utf8();
                chars.next();
            }
            out.push(code[i..end].to_string());
        } else if c == ':' && chars.peek().is_some_and(|&(_, d)| d == ':') {
            chars.next();
            out.push("::".into());
        } else if c == '"' {
            // A string may hold a path (`#[serde(with = "crate::x::y")]`): tokenize its inside.
            let mut s = String::new();
            while let Some((_, d)) = chars.next() {
                if d == '\\' {
                    chars.next();
                } else if d == '"' {
                    break;
                } else {
                    s.push(d);
                }
            }
            if s.starts_with("crate::") && !s.contains(' ') {
                out.extend(tokenize(&s));
                out.push(";".into());
            }
        } else if !c.is_whitespace() {
            out.push(c.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> BTreeMap<String, String> {
        list.iter().map(|(m, t)| (m.to_string(), t.to_string())).collect()
    }

    #[test]
    fn groups_resolve_to_the_longest_module() {
        let g = graph(&files(&[
            ("", "pub mod a; pub mod b;"),
            ("a", "pub mod x;"),
            ("a::x", "pub struct X;"),
            ("b", "use crate::{a::x::{self, X}, a};\nfn f() { let _ = super::a::x::X; }"),
        ]));
        assert_eq!(g["b"], BTreeSet::from(["a".to_string(), "a::x".to_string()]));
        assert!(cycles(&g).is_empty());
    }

    #[test]
    fn a_cycle_through_a_child_is_found_and_tests_and_comments_do_not_count() {
        let g = graph(&files(&[
            ("", "pub mod p; pub mod q;"),
            ("p", "mod c;\nfn f() { c::go() }\n// crate::q::Q\n#[cfg(test)]\nmod tests { use crate::q::Q; }"),
            ("p::c", "use super::helper;"),
            ("q", "/* crate::p */ pub struct Q;"),
        ]));
        assert_eq!(cycles(&g), vec![vec!["p".to_string(), "p::c".to_string()]]);
        assert!(g["p"].iter().all(|d| d != "q"), "{g:?}");
        assert!(g["q"].is_empty());
    }

    #[test]
    fn an_import_from_a_higher_layer_is_reported() {
        let g = graph(&files(&[("", ""), ("low", ""), ("high", "use crate::low::X;"), ("mid", "use crate::high::Y;")]));
        let top = top_level(&g);
        assert!(layer_violations(&top, &["low", "mid", "high"]) == vec!["mid imports from high, a layer above it"]);
        assert!(layer_violations(&top, &["low", "high", "mid"]).is_empty());
        assert_eq!(layer_violations(&top, &["low", "high"]).len(), 1, "mid is in no layer");
    }

    #[test]
    fn folders_fold_onto_top_level_cycles() {
        let g = graph(&files(&[
            ("", ""),
            ("a", ""),
            ("a::inner", "use crate::b::Thing;"),
            ("b", "#[serde(with = \"crate::a::serde_fns\")]\nstruct S;"),
        ]));
        assert!(cycles(&g).is_empty());
        assert_eq!(cycles(&top_level(&g)), vec![vec!["a".to_string(), "b".to_string()]]);
    }
}
