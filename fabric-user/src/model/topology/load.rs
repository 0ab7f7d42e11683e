//! Reading a topology: TOML into [`Topology`], every field checked, errors naming the field.
use super::{Topology, validate};

/// A topology file that could not be used; the message names the field and the problem.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: {message}")]
pub struct TopologyError {
    pub source_name: String,
    pub message: String,
}

impl Topology {
    /// Parses and validates a topology. `source_name` (a path, or "<default>") prefixes errors.
    pub fn parse(text: &str, source_name: &str) -> Result<Self, TopologyError> {
        let topo: Topology = toml::from_str(text).map_err(|e| {
            // Prefix the field path (`zones[1].racks: ...`) when the error points at one.
            let message = match validate::toml_error_path(text, &e) {
                Some(path) => format!("{path}: {e}"),
                None => e.to_string(),
            };
            TopologyError { source_name: source_name.into(), message }
        })?;
        topo.validate().map_err(|message| TopologyError { source_name: source_name.into(), message })?;
        Ok(topo)
    }

    /// Reads and validates a topology file, or the embedded default when `path` is `None`.
    pub fn load(path: Option<&std::path::Path>) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        match path {
            None => Ok(Self::default_topology()),
            Some(p) => {
                let text = std::fs::read_to_string(p).with_context(|| format!("reading topology {}", p.display()))?;
                Ok(Self::parse(&text, &p.display().to_string())?)
            }
        }
    }
}
