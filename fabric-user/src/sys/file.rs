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
    let bytes = serde_json::to_vec_pretty(value)?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", Path::new(&tmp).display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
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
        assert!(!dir.join("a/b.json.partial").exists(), "no temporary left behind");
        // A folder where the file should be: the error names the path, nothing half written.
        let err = write_json(&dir.join("a"), &1).unwrap_err();
        assert!(format!("{err:#}").contains("a"), "{err:#}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
