// SPDX-License-Identifier: GPL-2.0-or-later
//! SQL on a `cannoli export parquet` directory with DuckDB, through its
//! Python wheel (`scripts/deps.sh` installs it): a real query engine that
//! knows nothing of cannoli reads the files, so a test checks the files as
//! any user's engine sees them.

use std::path::Path;
use std::process::Command;

/// Runs each query in `queries` on `dir` with DuckDB; `{dir}` in a query
/// is replaced by the directory. Returns each query's rows, each row's
/// values as DuckDB prints them in Python (`str()`; `None` for NULL).
pub fn duckdb(dir: &Path, queries: &[String]) -> Result<Vec<Vec<Vec<String>>>, String> {
    const SCRIPT: &str = r#"
import sys, json, duckdb
con = duckdb.connect()
out = []
for q in json.loads(sys.stdin.read()):
    out.append([[str(v) for v in row] for row in con.execute(q).fetchall()])
print(json.dumps(out))
"#;
    let d = dir.to_string_lossy();
    let qs: Vec<String> = queries.iter().map(|q| q.replace("{dir}", &d)).collect();
    let input = json_strings(&qs);
    let mut child = Command::new("python3")
        .args(["-c", SCRIPT])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run python3 (scripts/deps.sh installs it): {e}"))?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("piped");
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| format!("python3: {e}"))?;
    }
    let o = child
        .wait_with_output()
        .map_err(|e| format!("python3: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "DuckDB failed ({}); `python3 -c 'import duckdb'` must work (scripts/deps.sh):\n{}\nqueries:\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr),
            qs.join("\n")
        ));
    }
    let text = String::from_utf8_lossy(&o.stdout);
    let j = crate::recording::Json::parse(text.trim())?;
    Ok(j.as_array()
        .iter()
        .map(|rows| {
            rows.as_array()
                .iter()
                .map(|row| {
                    row.as_array()
                        .iter()
                        .map(|v| v.as_str().unwrap_or("").to_string())
                        .collect()
                })
                .collect()
        })
        .collect())
}

/// `strings` as a JSON array.
fn json_strings(strings: &[String]) -> String {
    let mut s = String::from("[");
    for (i, q) in strings.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push('"');
        for c in q.chars() {
            match c {
                '"' => s.push_str("\\\""),
                '\\' => s.push_str("\\\\"),
                '\n' => s.push_str("\\n"),
                c if (c as u32) < 0x20 => s.push_str(&format!("\\u{:04x}", c as u32)),
                c => s.push(c),
            }
        }
        s.push('"');
    }
    s.push(']');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_json() {
        assert_eq!(
            json_strings(&["a \"b\"\n".into(), "c\\".into()]),
            r#"["a \"b\"\n","c\\"]"#
        );
    }
}
