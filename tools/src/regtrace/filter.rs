// SPDX-License-Identifier: GPL-2.0-or-later
//! Which instructions the client itself keeps: those in the `--range` and
//! `--func` ranges of a replay (a live run's hook library leaves out the
//! rest inside QEMU).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cannoli::ClientInfo;

use super::ranges::{func_ranges, FuncError};
use super::tracer::Run;

/// The ranges the client itself keeps instructions of. Empty in a live
/// run, where the hook library already left the rest out.
pub(super) struct Filter {
    ranges: Arc<[(u64, u64)]>,
}

/// What [`Filter::of`] needs: `--range` and `--func` of a replay, whose
/// functions are looked up in the first recorded process's program (the
/// one a live run would have read them from).
pub(super) struct ReplayRanges {
    pub(super) ranges: Vec<(u64, u64)>,
    pub(super) funcs: Vec<String>,
}

impl Filter {
    pub(super) fn of(run: &Run, ci: &ClientInfo) -> Filter {
        let Some(r) = &run.replay else {
            return Filter {
                ranges: Arc::new([]),
            };
        };
        let ranges = run.resolved.get_or_init(|| {
            let mut ranges = r.ranges.clone();
            if !r.funcs.is_empty() {
                // Too late to refuse the command line: the replay has begun.
                let found = match &ci.exe {
                    Some(exe) => func_ranges(Path::new(exe), &r.funcs).and_then(|f| {
                        match f.iter().zip(&r.funcs).find(|(f, _)| f.pie) {
                            Some((_, name)) => Err(FuncError::Pie {
                                name: name.clone(),
                                path: PathBuf::from(exe),
                            }),
                            None => Ok(f),
                        }
                    }),
                    None => Err(FuncError::NoProgram),
                };
                match found {
                    Ok(f) => ranges.extend(f.iter().map(|f| (f.start, f.end))),
                    Err(e) => {
                        eprintln!("regtrace: {e}");
                        std::process::exit(2)
                    }
                }
            }
            ranges.into()
        });
        Filter {
            ranges: ranges.clone(),
        }
    }

    pub(super) fn traces(&self, pc: u64) -> bool {
        self.ranges.is_empty() || self.ranges.iter().any(|&(lo, hi)| lo <= pc && pc < hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_keeps_what_is_in_range() {
        let all = Filter {
            ranges: Arc::new([]),
        };
        assert!(all.traces(0) && all.traces(u64::MAX));
        let some = Filter {
            ranges: Arc::new([(0x10, 0x20), (0x40, 0x41)]),
        };
        let kept: Vec<u64> = [0xf, 0x10, 0x1f, 0x20, 0x40, 0x41]
            .into_iter()
            .filter(|&pc| some.traces(pc))
            .collect();
        assert_eq!(kept, [0x10, 0x1f, 0x40]);
    }
}
