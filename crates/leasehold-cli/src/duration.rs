//! Durations as people type them: `500ms`, `30s`, `5m`, `1h`.

use std::time::Duration;

pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let hint = "use a whole number with a unit, such as 500ms, 30s, 5m or 1h";
    if digits.is_empty() {
        return Err(format!("{text:?} is not a duration: {hint}"));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is too large a duration: {hint}"))?;
    let per_unit = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "" => return Err(format!("{text:?} has no unit: {hint}")),
        _ => return Err(format!("{text:?} has an unknown unit {unit:?}: {hint}")),
    };
    n.checked_mul(per_unit)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is too large a duration: {hint}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_documented_forms() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn refuses_the_rest_with_a_hint() {
        for bad in [
            "",
            "30",
            "s",
            "1.5s",
            "-1s",
            "10 parsecs",
            "5d",
            "99999999999999999999s",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("500ms"), "{bad}: {err}");
        }
    }
}
