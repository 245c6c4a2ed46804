// SPDX-License-Identifier: GPL-2.0-or-later
//! ARM's mapping symbols (`$a`, `$t`, `$d`): whether code a module's file
//! holds is A32 or Thumb, for the pcs QEMU did not size.

use object::{Object, ObjectSymbol};

/// ARM's mapping symbols of an ELF file, sorted by link-time address:
/// `$a` starts A32 code (`Some(false)`), `$t` Thumb code (`Some(true)`),
/// `$d` data (`None`).
pub(super) type ArmModes = Vec<(u64, Option<bool>)>;

/// The [`ArmModes`] of an ELF file; empty for other files.
pub(super) fn arm_modes(data: &[u8]) -> ArmModes {
    let Ok(file) = object::File::parse(data) else {
        return Vec::new();
    };
    if file.architecture() != object::Architecture::Arm {
        return Vec::new();
    }
    let mut v: ArmModes = file
        .symbols()
        .filter_map(|s| {
            let name = s.name().ok()?;
            let thumb = match name.split('.').next()? {
                "$a" => Some(false),
                "$t" => Some(true),
                "$d" => None,
                _ => return None,
            };
            Some((s.address(), thumb))
        })
        .collect();
    v.sort_by_key(|&(a, _)| a);
    v
}

/// What the mapping symbols say about link-time address `addr`: Thumb,
/// A32, or nothing (no symbol before it, or data).
pub(super) fn arm_mode_at(modes: &[(u64, Option<bool>)], addr: u64) -> Option<bool> {
    let i = modes.partition_point(|&(a, _)| a <= addr);
    modes.get(i.checked_sub(1)?)?.1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arm_mapping_symbols() {
        let modes = [(0x100, Some(false)), (0x200, None), (0x208, Some(true))];
        assert_eq!(arm_mode_at(&modes, 0xfc), None);
        assert_eq!(arm_mode_at(&modes, 0x100), Some(false));
        assert_eq!(arm_mode_at(&modes, 0x1fc), Some(false));
        assert_eq!(arm_mode_at(&modes, 0x204), None);
        assert_eq!(arm_mode_at(&modes, 0x208), Some(true));
        assert_eq!(arm_mode_at(&modes, 0x9000), Some(true));
        // Not an ARM file (this test binary): no mapping symbols.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(arm_modes(&exe).is_empty());
    }
}
