//! Result files: written whole or not at all.
use std::path::Path;

use anyhow::{Context as _, Result};
use serde::Serialize;

/// Writes `value` as pretty JSON to `path`, creating its folder: into a temporary file beside it,
/// then renamed over it, so that a reader (or a crash) never sees half a file. Prints where.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    write_whole(path, &serde_json::to_vec_pretty(value)?)?;
    println!("wrote {}", path.display());
    Ok(())
}

/// Writes `bytes` to `path` (its folder must exist) through a temporary file beside it, renamed
/// over it: a reader sees the old file or the new one, never half of one. Nothing is left
/// behind when it fails. The temporary's name holds the process id: two processes writing one
/// file each rename their own.
pub fn write_whole(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.partial", std::process::id()));
    let tmp = Path::new(&tmp);
    let written = std::fs::write(tmp, bytes)
        .with_context(|| format!("writing {}", tmp.display()))
        .and_then(|()| std::fs::rename(tmp, path).with_context(|| format!("writing {}", path.display())));
    if written.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_whole_files_and_names_a_bad_path() {
        let dir = std::env::temp_dir().join(format!("fabric-write-json-{}", std::process::id()));
        let path = dir.join("a/b.json");
        write_json(&path, &serde_json::json!({"k": 1})).unwrap();
        let back: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(back["k"], 1);
        let partial = |name: &str| dir.join(format!("{name}.{}.partial", std::process::id()));
        assert!(!partial("a/b.json").exists(), "no temporary left behind");
        // A folder where the file should be: the error names the path, nothing half written.
        let folder = dir.join("a");
        let err = write_json(&folder, &1).unwrap_err();
        assert!(format!("{err:#}").starts_with(&format!("writing {}: ", folder.display())), "{err:#}");
        assert!(!partial("a").exists(), "the temporary is removed when the rename fails");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
