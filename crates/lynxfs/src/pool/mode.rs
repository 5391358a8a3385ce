//! The data mode: what a write promises when it is torn by a crash
//! (docs/CONSISTENCY.md, "write").

use std::str::FromStr;

/// How overwrites of a file's allocated blocks reach the pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DataMode {
    /// Every block a reader could see is written to a fresh block and published with
    /// the map: after a crash a write is wholly there or wholly absent.
    #[default]
    Atomic,
    /// Overwrites of allocated blocks go in place (AEON's in-place updates): metadata
    /// (size, map, times) stays atomic, but a torn overwrite may leave each byte old
    /// or new.
    Inplace,
}

impl DataMode {
    /// The name `mkfs --data` and `-o data=` take.
    pub fn name(self) -> &'static str {
        match self {
            DataMode::Atomic => "atomic",
            DataMode::Inplace => "inplace",
        }
    }
}

/// An unknown data mode's name.
#[derive(Debug, thiserror::Error)]
#[error("data mode {0:?}: must be atomic or inplace")]
pub struct BadDataMode(String);

impl FromStr for DataMode {
    type Err = BadDataMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "atomic" => Ok(DataMode::Atomic),
            "inplace" => Ok(DataMode::Inplace),
            other => Err(BadDataMode(other.into())),
        }
    }
}

impl std::fmt::Display for DataMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
