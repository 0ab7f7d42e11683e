//! Quantities as users write them, parsed once where they come in (the command line, a
//! workload file) into typed values.
use std::{fmt, str::FromStr};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A hash seed as topology files and `fabric analyze` write it: decimal, or hex after `0x`.
pub fn parse_seed(s: &str) -> Result<u32, String> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|e| format!("{s:?} is not a 32-bit seed, decimal or 0x-hex ({e})"))
}

/// `4Mi`, `100M`, `1500`: K, M, G multiply by 1000 (rates), Ki, Mi, Gi by 1024 (sizes).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        None => (s, 1u64),
        Some((i, _)) => {
            let mult = match &s[i..] {
                "K" | "k" => 1_000,
                "M" => 1_000_000,
                "G" => 1_000_000_000,
                "Ki" => 1 << 10,
                "Mi" => 1 << 20,
                "Gi" => 1 << 30,
                other => {
                    return Err(format!("unknown suffix {other:?}: use K, M, G (x1000) or Ki, Mi, Gi (x1024)"));
                }
            };
            (&s[..i], mult)
        }
    };
    let n = num.parse::<u64>().map_err(|e| format!("{s:?}: {e}"))?;
    n.checked_mul(mult).ok_or_else(|| format!("{s:?} is too large"))
}

/// A byte count or a rate in bits/s (`4Mi`, `100M`, `1500`; see [`parse_size`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Size(pub u64);

impl Size {
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_size(s).map(Size)
    }
}

/// The shortest exact spelling: binary suffixes for multiples of 1024, decimal ones for
/// multiples of 1000, digits otherwise (so that `--help` shows defaults as they are written).
impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        let units: [(u64, &str); 6] =
            [(1 << 30, "Gi"), (1_000_000_000, "G"), (1 << 20, "Mi"), (1_000_000, "M"), (1 << 10, "Ki"), (1_000, "K")];
        match units.iter().find(|(u, _)| n > 0 && n.is_multiple_of(*u)) {
            Some((u, suffix)) => write!(f, "{}{suffix}", n / u),
            None => write!(f, "{n}"),
        }
    }
}

/// In files: a string (`"4Mi"`) or a plain integer.
impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => Ok(Size(n)),
            Raw::Text(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_rates() {
        assert_eq!(parse_size("4Mi"), Ok(4 << 20));
        assert_eq!(parse_size("100M"), Ok(100_000_000));
        assert_eq!(parse_size("1500"), Ok(1500));
        assert!(parse_size("3X").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("20000000000Gi").is_err(), "overflow is an error, not a wrap");
    }

    #[test]
    fn sizes_print_as_they_parse() {
        for (n, text) in
            [(4 << 20, "4Mi"), (100_000_000, "100M"), (1500, "1500"), (0, "0"), (3 << 30, "3Gi"), (256 << 10, "256Ki")]
        {
            assert_eq!(Size(n).to_string(), text);
            assert_eq!(text.parse::<Size>(), Ok(Size(n)));
        }
        #[derive(Deserialize)]
        struct F {
            a: Size,
            b: Size,
        }
        let f: F = toml::from_str("a = \"2Ki\"\nb = 7").unwrap();
        assert_eq!((f.a, f.b), (Size(2048), Size(7)));
        assert!(toml::from_str::<F>("a = \"2X\"\nb = 1").is_err());
    }
}
