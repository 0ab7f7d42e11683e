//! Finding and reading a trace's files: one per rank (Chakra ET or PARAM JSON), or one for every
//! rank (SPMD), and the process groups beside them.
use std::collections::BTreeMap;

use anyhow::{Result, bail};

use super::{TraceInput, chakra, param};

/// How many ranks one SPMD file may be replayed on: a job needs two, and each rank holds a copy
/// of the file's ops (65,536 is more than twice the 24K-GPU cluster).
pub const SPMD_RANKS: std::ops::RangeInclusive<usize> = 2..=65_536;

/// Reads a trace: a Chakra ET file (`NAME.RANK.et`, whose siblings `NAME.*.et` are the other
/// ranks; or a directory of them), or PARAM JSON (`*.json`, siblings `PREFIX*.json` numbered by
/// rank; or a directory of them). A lone file without a rank number is every rank's trace
/// (SPMD) for `spmd_ranks` ranks. A `comm_groups.json` beside the files names process groups.
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
            format!("{}: one file without a rank number is replayed on every rank: give --ranks", path.display())
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

/// The per-rank files of a trace path, with their rank numbers (`None`: a lone, unnumbered file).
/// A trace's directory and its files with their rank numbers.
type RankFiles = (std::path::PathBuf, Vec<(Option<usize>, std::path::PathBuf)>);

fn rank_files(path: &std::path::Path) -> Result<RankFiles> {
    use anyhow::Context as _;
    let rank_of = |p: &std::path::Path| -> Option<(String, usize)> {
        let stem = p.file_stem()?.to_str()?;
        let digits = stem.len() - stem.bytes().rev().take_while(u8::is_ascii_digit).count();
        let n = stem[digits..].parse().ok()?;
        Some((stem[..digits].to_string(), n))
    };
    let is_trace = |p: &std::path::Path| {
        p.extension().is_some_and(|e| e == "et" || e == "json")
            && p.file_name().is_some_and(|n| n != "comm_groups.json")
    };
    let (dir, prefix, ext) = if path.is_dir() {
        (path.to_path_buf(), None, None)
    } else {
        let dir = path.parent().map_or_else(|| std::path::PathBuf::from("."), std::path::Path::to_path_buf);
        let dir = if dir.as_os_str().is_empty() { std::path::PathBuf::from(".") } else { dir };
        std::fs::metadata(path).with_context(|| format!("reading trace {}", path.display()))?;
        match rank_of(path) {
            Some((prefix, _)) => (dir, Some(prefix), path.extension().map(|e| e.to_os_string())),
            None => return Ok((dir, vec![(None, path.to_path_buf())])),
        }
    };
    let mut files = Vec::new();
    for e in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let p = e?.path();
        if !is_trace(&p) || ext.as_ref().is_some_and(|x| p.extension() != Some(x.as_os_str())) {
            continue;
        }
        match rank_of(&p) {
            Some((pre, r)) if prefix.as_ref().is_none_or(|x| *x == pre) => files.push((Some(r), p)),
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
