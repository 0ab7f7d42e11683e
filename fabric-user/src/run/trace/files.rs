//! Finding and reading a trace's files: one per rank (Chakra ET or PARAM JSON), or one for every
//! rank (SPMD), and the process groups beside them.
use std::collections::BTreeMap;

use anyhow::{Result, bail};

use super::{TraceInput, chakra, param};

/// How many ranks one SPMD file may be replayed on: a job needs two, and each rank holds a copy
/// of the file's ops (65,536 is more than twice the 24K-GPU cluster).
pub const SPMD_RANKS: std::ops::RangeInclusive<usize> = 2..=65_536;

/// Reads a trace: a Chakra ET file (`NAME.RANK.et`, whose siblings `NAME.*.et` are the other
/// ranks; or a directory of them), or PARAM JSON (`NAME.RANK.json` or `NAME<RANK>.json`, siblings
/// with the same prefix numbered by rank; or a directory of them). A lone file without a rank
/// number is every rank's trace (SPMD) for `spmd_ranks` ranks: `llama3.et`, and `resnet50.json`
/// when no sibling `resnet<N>.json` makes it one of a set. A `comm_groups.json` beside the files
/// names process groups.
pub fn load(path: &std::path::Path, spmd_ranks: Option<usize>) -> Result<TraceInput> {
    use anyhow::Context as _;
    let (dir, files) = rank_files(path)?;
    let ext_et = files.iter().all(|(_, p)| p.extension().is_some_and(|e| e == "et"));
    let ext_json = files.iter().all(|(_, p)| p.extension().is_some_and(|e| e == "json"));
    let mut input = TraceInput::default();
    let spmd = files.len() == 1 && files[0].0.is_none();
    if let Some(n) = spmd_ranks {
        anyhow::ensure!(
            spmd || n == files.len(),
            "ranks {n} given, but {} holds a file per rank ({} files): its ranks are its files",
            path.display(),
            files.len()
        );
        anyhow::ensure!(
            !spmd || SPMD_RANKS.contains(&n),
            "ranks {n}: one file is replayed on {}..={} ranks",
            SPMD_RANKS.start(),
            SPMD_RANKS.end()
        );
    }
    let mut param_groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (_, f) in &files {
        let rt = if ext_et {
            input.format = "chakra";
            chakra::read_rank(f)?
        } else if ext_json {
            input.format = "param";
            let (rt, groups) = param::read_rank(f)?;
            for (g, m) in groups {
                if let Some(prev) = param_groups.insert(g.clone(), m.clone())
                    && prev != m
                {
                    bail!(
                        "{}: process group {g} has members {m:?} here but {prev:?} in another rank's file",
                        f.display()
                    );
                }
            }
            rt
        } else {
            bail!("{}: a trace is Chakra (.et) or PARAM (.json) files", path.display())
        };
        input.ranks.push(rt);
    }
    if spmd {
        let n = spmd_ranks.with_context(|| {
            format!(
                "{}: one file without a rank number is replayed on every rank: give the rank count \
                 (--ranks of fabric run trace, --trace-ranks of fabric sim, `ranks` in a jobs file)",
                path.display()
            )
        })?;
        let one = input.ranks.pop().expect("one file");
        input.ranks = vec![one; n];
    }
    let groups = dir.join("comm_groups.json");
    if groups.exists() {
        input.groups = read_groups(&groups)?;
    }
    for (g, m) in param_groups {
        input.groups.entry(g).or_insert(m);
    }
    Ok(input)
}

/// ASTRA-sim's communicator-group file: `{"NAME": [rank, ...], ...}`.
pub fn read_groups(path: &std::path::Path) -> Result<BTreeMap<String, Vec<usize>>> {
    use anyhow::Context as _;
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: expected {{\"GROUP\": [RANK, ...]}}", path.display()))
}

/// A trace's directory and its files with their rank numbers.
type RankFiles = (std::path::PathBuf, Vec<(Option<usize>, std::path::PathBuf)>);

/// The prefix and rank of a per-rank trace file's name: `NAME.RANK.et` (the component after the
/// last `.` of the stem, all digits), or for PARAM `NAME.RANK.json` and `NAME<RANK>.json` (the
/// digits that end the stem; the boolean says the rank is glued to the name, so that the name
/// alone cannot tell it from a model's, as in `resnet50.json`). `None`: no rank in the name.
fn rank_of(p: &std::path::Path) -> Option<(String, usize, bool)> {
    let stem = p.file_stem()?.to_str()?;
    let (prefix, rank) = if p.extension().is_some_and(|e| e == "et") {
        let (name, rank) = stem.rsplit_once('.')?;
        (format!("{name}."), rank)
    } else {
        let digits = stem.len() - stem.bytes().rev().take_while(u8::is_ascii_digit).count();
        (stem[..digits].to_string(), &stem[digits..])
    };
    if rank.is_empty() || !rank.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let glued = !prefix.is_empty() && !prefix.ends_with('.');
    Some((prefix, rank.parse().ok()?, glued))
}

/// Whether another of `entries` (its directory's) has `path`'s extension and rank prefix: a file
/// whose rank is glued to its name (`rank3.json`) is one of a set only beside others of the set.
fn has_numbered_sibling(entries: &[std::path::PathBuf], path: &std::path::Path, prefix: &str) -> bool {
    entries.iter().any(|p| {
        p.extension() == path.extension()
            && p.file_name() != path.file_name()
            && rank_of(p).is_some_and(|(pre, _, _)| pre == prefix)
    })
}

/// The paths in `dir`, read once.
fn entries_of(dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
    use anyhow::Context as _;
    let read = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    let entries = read.map(|e| e.map(|e| e.path())).collect::<std::io::Result<_>>();
    entries.with_context(|| format!("reading {}", dir.display()))
}

/// The per-rank files of a trace path, with their rank numbers (`None`: a lone, unnumbered file).
fn rank_files(path: &std::path::Path) -> Result<RankFiles> {
    use anyhow::Context as _;
    let is_trace = |p: &std::path::Path| {
        p.extension().is_some_and(|e| e == "et" || e == "json")
            && p.file_name().is_some_and(|n| n != "comm_groups.json")
    };
    let (dir, entries, prefix, ext) = if path.is_dir() {
        (path.to_path_buf(), entries_of(path)?, None, None)
    } else {
        let dir = path.parent().map_or_else(|| std::path::PathBuf::from("."), std::path::Path::to_path_buf);
        let dir = if dir.as_os_str().is_empty() { std::path::PathBuf::from(".") } else { dir };
        std::fs::metadata(path).with_context(|| format!("reading trace {}", path.display()))?;
        let Some((prefix, _, glued)) = rank_of(path) else {
            return Ok((dir, vec![(None, path.to_path_buf())]));
        };
        let entries = entries_of(&dir)?;
        if glued && !has_numbered_sibling(&entries, path, &prefix) {
            return Ok((dir, vec![(None, path.to_path_buf())]));
        }
        (dir, entries, Some(prefix), path.extension().map(|e| e.to_os_string()))
    };
    let mut files = Vec::new();
    for p in entries {
        if !is_trace(&p) || ext.as_ref().is_some_and(|x| p.extension() != Some(x.as_os_str())) {
            continue;
        }
        match rank_of(&p) {
            Some((pre, r, _)) if prefix.as_ref().is_none_or(|x| *x == pre) => files.push((Some(r), p)),
            _ if prefix.is_none() => bail!("{}: a trace file without a rank number in its name", p.display()),
            _ => {}
        }
    }
    files.sort();
    if files.is_empty() {
        bail!("{}: no trace files (NAME.RANK.et or NAME<RANK>.json)", path.display());
    }
    for (i, (r, p)) in files.iter().enumerate() {
        if *r != Some(i) {
            bail!("{}: ranks must be numbered 0..{} without gaps or repeats", p.display(), files.len() - 1);
        }
    }
    Ok((dir, files))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::trace::shipped::dir;

    fn copy(from: &str, to: &std::path::Path) {
        std::fs::copy(dir().join(from), to).unwrap();
    }

    /// A rank number comes only from the documented names: `llama3.et` and a lone
    /// `resnet50.json` are one file for every rank, not rank 3 or 50 of a set.
    #[test]
    fn a_lone_file_whose_name_ends_in_a_digit_is_every_ranks_trace() {
        let tmp = tempfile::tempdir().unwrap();
        let et = tmp.path().join("llama3.et");
        copy("dp-step/dp-step.0.et", &et);
        assert_eq!(load(&et, Some(4)).unwrap_or_else(|e| panic!("{e:#}")).ranks.len(), 4);
        // Without a count, the error names where each command takes one.
        let e = format!("{:#}", load(&et, None).unwrap_err());
        assert!(e.contains("--ranks of fabric run trace, --trace-ranks of fabric sim"), "{e}");
        let json = tmp.path().join("resnet50.json");
        copy("tp-pp-step-param/rank0.json", &json);
        assert_eq!(load(&json, Some(4)).unwrap_or_else(|e| panic!("{e:#}")).ranks.len(), 4);
        // In a directory every file must carry a rank: `llama3.et` does not.
        let e = format!("{:#}", load(tmp.path(), None).unwrap_err());
        assert!(e.contains("llama3.et: a trace file without a rank number"), "{e}");
    }

    /// The per-rank forms still make sets: `NAME.RANK.et`, `NAME.RANK.json`, and `NAME<RANK>.json`
    /// beside its siblings.
    #[test]
    fn per_rank_names_make_a_set() {
        let tmp = tempfile::tempdir().unwrap();
        for r in 0..2 {
            copy(&format!("dp-step/dp-step.{r}.et"), &tmp.path().join(format!("m.v2.{r}.et")));
            copy(&format!("tp-pp-step-param/rank{r}.json"), &tmp.path().join(format!("p.{r}.json")));
            copy(&format!("tp-pp-step-param/rank{r}.json"), &tmp.path().join(format!("rank{r}.json")));
        }
        for file in ["m.v2.1.et", "p.1.json", "rank1.json"] {
            let input = load(&tmp.path().join(file), None).unwrap_or_else(|e| panic!("{file}: {e:#}"));
            assert_eq!(input.ranks.len(), 2, "{file}");
        }
        assert_eq!(rank_of(std::path::Path::new("llama3.et")), None);
        assert_eq!(rank_of(std::path::Path::new("x.12.et")), Some(("x.".into(), 12, false)));
        assert_eq!(rank_of(std::path::Path::new("rank7.json")), Some(("rank".into(), 7, true)));
    }
}
