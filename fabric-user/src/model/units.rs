//! Quantities as users write them.

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
    num.parse::<u64>().map(|n| n * mult).map_err(|e| format!("{s:?}: {e}"))
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
    }
}
