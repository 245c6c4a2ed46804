// SPDX-License-Identifier: GPL-2.0-or-later
//! What the client writes besides the trace: the `--split` index
//! (`streams.txt`, [`StreamInfo`]) and the closing stderr line
//! ([`Summary`]).

use std::path::{Path, PathBuf};

use super::parse::{decode_path, parse_dec};
use crate::lines::tail;

/// One stream of a `--split` run (a line of `streams.txt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    /// Its file, in the split directory.
    pub file: PathBuf,
    pub pid: i32,
    pub ppid: i32,
    pub tid: i32,
    /// The program, decoded; empty if unknown.
    pub exe: String,
}

impl StreamInfo {
    /// Parses a line of `streams.txt` in the split directory `dir`.
    pub fn parse(dir: &Path, line: &str) -> Result<StreamInfo, String> {
        let f: Vec<&str> = line.splitn(9, ' ').collect();
        let ok = f.len() == 9 && f[1] == "pid" && f[3] == "ppid" && f[5] == "tid" && f[7] == "exe";
        if !ok {
            return Err(format!("bad line {line:?}"));
        }
        let num = |s: &str| parse_dec::<i32>(s).map_err(|e| format!("{e} in {line:?}"));
        Ok(StreamInfo {
            file: dir.join(f[0]),
            pid: num(f[2])?,
            ppid: num(f[4])?,
            tid: num(f[6])?,
            exe: decode_path(f[8])?,
        })
    }
}

/// The client's closing stderr line: `cannoli-dump: N connections, N events
/// in N chunks, N lost, N incomplete streams; N lines to DEST in S.SSSs (N
/// threads)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    pub connections: u64,
    pub events: u64,
    pub chunks: u64,
    pub lost: u64,
    pub incomplete: u64,
}

impl Summary {
    /// The line the client prints, with what only the client knows: the
    /// lines it wrote, where to, the seconds it took and its threads.
    pub fn line(&self, lines: u64, dest: &str, secs: f64, threads: usize) -> String {
        format!(
            "cannoli-dump: {} connections, {} events in {} chunks, {} lost, {} incomplete streams; \
             {lines} lines to {dest} in {secs:.3}s ({threads} threads)",
            self.connections, self.events, self.chunks, self.lost, self.incomplete,
        )
    }

    /// Finds and parses the summary line in the client's stderr.
    pub fn parse(stderr: &str) -> Result<Summary, String> {
        let line = stderr
            .lines()
            .find(|l| l.starts_with("cannoli-dump: ") && l.contains(" connections, "))
            .ok_or_else(|| {
                format!(
                    "no summary line in the client's stderr:\n{}",
                    tail(stderr, 20)
                )
            })?;
        let words: Vec<&str> = line
            .split([' ', ',', ';'])
            .filter(|w| !w.is_empty())
            .collect();
        let before = |what: &str| -> Result<u64, String> {
            let i = words
                .iter()
                .position(|w| *w == what)
                .filter(|&i| i > 0)
                .ok_or_else(|| format!("no `{what}` in {line:?}"))?;
            words[i - 1]
                .parse()
                .map_err(|_| format!("bad number before `{what}` in {line:?}"))
        };
        Ok(Summary {
            connections: before("connections")?,
            events: before("events")?,
            chunks: before("chunks")?,
            lost: before("lost")?,
            incomplete: before("incomplete")?,
        })
    }
}
