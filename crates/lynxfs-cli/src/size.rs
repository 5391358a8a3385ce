//! Sizes as people write them: 65536, 64K, 512M, 1G, 2GiB.

pub fn parse(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (try 64M or 1G)"))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => {
            return Err(format!(
                "unknown size unit '{unit}' in '{s}' (use K, M, G or T)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size '{s}' is too large"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes() {
        assert_eq!(super::parse("65536"), Ok(65536));
        assert_eq!(super::parse("64K"), Ok(65536));
        assert_eq!(super::parse("1G"), Ok(1 << 30));
        assert_eq!(super::parse("2GiB"), Ok(2 << 30));
        assert!(super::parse("1X").is_err());
        assert!(super::parse("G").is_err());
        assert!(super::parse("99999999999T").is_err());
    }
}
