// SPDX-License-Identifier: GPL-2.0-or-later
//! Each module's covered blocks, built at the end from the instruction
//! starts that ran and their lengths, with the module's row of the file.

use std::collections::HashMap;
use std::sync::Arc;

use object::{Object, ObjectSegment};

use super::arm::{arm_mode_at, arm_modes, ArmModes};
use super::collected::Coverage;
use super::drcov::{self, DrcovModule};
use super::isa::Isa;
use super::space::Module;

/// Link-time address minus run-time address of module `m`'s code (0 if
/// the file says nothing), as [`entry`] works it out.
fn link_bias(data: &[u8], m: &Module) -> u64 {
    object::File::parse(data)
        .ok()
        .and_then(|file| load_bias(&file, m))
        .unwrap_or(0)
}

/// One module of the output, with its blocks.
pub(super) struct ModuleOut {
    pub(super) row: DrcovModule,
    pub(super) blocks: Vec<(u64, u64)>,
    pub(super) insns: usize,
    pub(super) bytes: u64,
}

/// The entry point of the ELF image in `data` as loaded for `m` (0 if the
/// file says nothing).
fn entry(data: &[u8], m: &Module) -> u64 {
    let Ok(file) = object::File::parse(data) else {
        return 0;
    };
    load_bias(&file, m).map_or(0, |b| file.entry().wrapping_sub(b))
}

/// Link-time address minus run-time address of `m`: where the segment
/// holding the mapping's file offset landed, against where the file says
/// it goes.
fn load_bias(file: &object::File<'_>, m: &Module) -> Option<u64> {
    file.segments().find_map(|seg| {
        let (off, size) = seg.file_range();
        (off <= m.offset && m.offset < off + size.max(1)).then(|| {
            let want = seg.address().wrapping_add(m.offset - off);
            want.wrapping_sub(m.start)
        })
    })
}

/// Builds each module's blocks. Modules without blocks are kept if they
/// map a file (DynamoRIO lists every loaded module), dropped if anonymous.
pub(super) fn build(c: &Coverage) -> Vec<ModuleOut> {
    let mut files: HashMap<Arc<str>, Option<Vec<u8>>> = HashMap::new();
    let mut out = Vec::new();
    for (id, m) in c.modules.iter() {
        let hits = c.hits.get(id as usize);
        let mut pcs: Vec<u64> = hits
            .map(|h| h.iter().copied().collect())
            .unwrap_or_default();
        if pcs.is_empty() && m.path.is_none() {
            continue;
        }
        pcs.sort_unstable();
        let isa = Isa::of(&m.arch);
        let data = m.path.as_ref().and_then(|p| {
            files
                .entry(p.clone())
                .or_insert_with(|| std::fs::read(&**p).ok())
                .as_deref()
        });
        let reported = c.lens.get(id as usize);
        // Only for ARM pcs QEMU did not size (there should be none).
        let mut modes: Option<(ArmModes, u64)> = None;
        let len = |pc: u64| {
            if let Some(&n) = reported.and_then(|l| l.get(&pc)) {
                return n as u64;
            }
            let isa = match (isa, data) {
                (Isa::Arm, Some(d)) => {
                    let (modes, bias) =
                        modes.get_or_insert_with(|| (arm_modes(d), link_bias(d, m)));
                    isa.arm_mode(pc, arm_mode_at(modes, pc.wrapping_add(*bias)))
                }
                _ => isa.arm_mode(pc, None),
            };
            let code = data.filter(|_| isa.needs_code()).and_then(|d| {
                let off = usize::try_from(m.file_offset(pc)).ok()?;
                d.get(off..(off + 15).min(d.len()))
            });
            isa.len(code)
        };
        let blocks = drcov::coalesce(&pcs, u16::MAX as u64, len);
        let bytes = blocks.iter().map(|(s, e)| e - s).sum();
        out.push(ModuleOut {
            row: DrcovModule {
                base: m.base(),
                end: m.end,
                entry: data.map(|d| entry(d, m)).unwrap_or(0),
                path: m
                    .path
                    .as_deref()
                    .map(str::to_string)
                    .unwrap_or_else(|| "[anon]".to_string()),
            },
            blocks,
            insns: pcs.len(),
            bytes,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_of_a_static_and_a_relocated_image() {
        // The test binary itself: an x86-64 ELF (PIE or not).
        let exe = std::env::current_exe().unwrap();
        let data = std::fs::read(&exe).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let first = file
            .segments()
            .find(|s| s.file_range().0 == 0)
            .expect("a segment at file offset 0");
        let m = Module {
            path: Some(exe.to_string_lossy().as_ref().into()),
            start: first.address(),
            end: first.address() + 0x1000,
            offset: 0,
            arch: "x86_64".into(),
            bits: 64,
        };
        assert_eq!(entry(&data, &m), file.entry());
        let moved = Module {
            start: m.start + 0x5550_0000_0000,
            ..m.clone()
        };
        assert_eq!(entry(&data, &moved), file.entry() + 0x5550_0000_0000);
        assert_eq!(entry(b"not an elf", &m), 0);
    }
}
