//! Medians and the markdown table.
//!
//! The table is padded so that it reads well as plain text and renders as
//! a table in markdown.

/// Median of `v` (mean of the two middle values for an even count); `None`
/// for no values. Medians rather than means, so that one run disturbed by
/// the other processes on a small machine does not move the result.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let m = s.len() / 2;
    Some(if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    })
}

/// Median of integer values, rounded down for an even count.
pub fn median_u64(v: &[u64]) -> Option<u64> {
    let mut s = v.to_vec();
    if s.is_empty() {
        return None;
    }
    s.sort_unstable();
    let m = s.len() / 2;
    Some(if s.len() % 2 == 1 {
        s[m]
    } else {
        s[m - 1] + (s[m] - s[m - 1]) / 2
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A markdown table with every column padded to its widest cell.
pub fn render(headers: &[&str], align: &[Align], rows: &[Vec<String>]) -> String {
    let n = headers.len();
    let mut width: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(n) {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| format!("| {} |\n", cells.join(" | "));
    let pad = |i: usize, s: &str| {
        let fill = " ".repeat(width[i].saturating_sub(s.chars().count()));
        match align.get(i) {
            Some(Align::Right) => format!("{fill}{s}"),
            _ => format!("{s}{fill}"),
        }
    };
    let mut out = line(headers.iter().enumerate().map(|(i, h)| pad(i, h)).collect());
    out += &line(
        (0..n)
            .map(|i| match align.get(i) {
                Some(Align::Right) => format!("{}:", "-".repeat(width[i].max(2) - 1)),
                _ => "-".repeat(width[i].max(1)),
            })
            .collect(),
    );
    for r in rows {
        out += &line(
            (0..n)
                .map(|i| pad(i, r.get(i).map(String::as_str).unwrap_or("")))
                .collect(),
        );
    }
    out
}

/// `1040000123` as `1,040,000,123`: exact, since the counts are compared.
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

pub fn secs(s: f64) -> String {
    format!("{s:.3}")
}

/// Instructions per second in millions.
pub fn rate(insns: u64, secs: f64) -> String {
    if secs <= 0.0 {
        return "-".into();
    }
    let m = insns as f64 / secs / 1e6;
    if m >= 100.0 {
        format!("{m:.0} M")
    } else {
        format!("{m:.1} M")
    }
}

pub fn ratio(r: f64) -> String {
    if r >= 10.0 {
        format!("{r:.1}x")
    } else {
        format!("{r:.2}x")
    }
}

/// KiB as MiB.
pub fn mib(kb: u64) -> String {
    format!("{:.1}", kb as f64 / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[9.0, f64::NAN, 1.0, 2.0]), Some(2.0));
        assert_eq!(median_u64(&[]), None);
        assert_eq!(median_u64(&[7, 1, 4]), Some(4));
        assert_eq!(median_u64(&[10, 1, 3, 20]), Some(6));
        assert_eq!(median_u64(&[u64::MAX, u64::MAX]), Some(u64::MAX));
    }

    #[test]
    fn formats() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1040000123), "1,040,000,123");
        assert_eq!(rate(1_040_000_000, 0.5), "2080 M");
        assert_eq!(rate(10_000_000, 0.5), "20.0 M");
        assert_eq!(ratio(1.234), "1.23x");
        assert_eq!(ratio(15.26), "15.3x");
        assert_eq!(mib(2048), "2.0");
    }

    #[test]
    fn renders_aligned_markdown() {
        let t = render(
            &["name", "secs"],
            &[Align::Left, Align::Right],
            &[
                vec!["plain".into(), "1.5".into()],
                vec!["x".into(), "10.25".into()],
            ],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "| name  |  secs |");
        assert_eq!(lines[1], "| ----- | ----: |");
        assert_eq!(lines[2], "| plain |   1.5 |");
        assert_eq!(lines[3], "| x     | 10.25 |");
    }
}
