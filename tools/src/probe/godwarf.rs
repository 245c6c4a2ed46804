// SPDX-License-Identifier: GPL-2.0-or-later
//! Where a Go function under the stack convention (ABI0: the 32-bit
//! guests and MIPS, see `conv`) leaves its first result, from the DWARF
//! the Go linker writes (unless built with `-ldflags=-w`).
//!
//! ABI0 puts the arguments in the caller's frame, each at its own offset
//! from the canonical frame address (CFA), and the results after them,
//! from the first pointer-aligned offset past the last argument. Go's
//! DWARF gives each argument's offset (`DW_OP_fbreg`, the frame base being
//! the CFA) and each parameter's type and size, and marks the results
//! (`DW_AT_variable_parameter`), but gives an optimized function's results
//! no location: so the first result's offset is the end of the arguments,
//! rounded up to a pointer. An argument the function never uses has no
//! location either, but keeps its slot: its size places it, after the
//! argument before it. A function without arguments has its results
//! where its arguments would start: the CFA plus the saved return address's
//! slot on the link-register guests, the CFA itself on i386.
//!
//! The CFA is the frame's key (`conv`): the caller's stack pointer once the
//! function has returned. So the result is at `key + offset`, in memory the
//! function stored before its return.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use gimli::{AttributeValue, EndianSlice, RunTimeEndian};
use object::{Object, ObjectSection};

/// Where a function's first result is: bytes from the frame's key, and
/// how many bytes of it the probe reads (at most a word).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub offset: u64,
    pub len: u64,
}

/// Most bytes a debug section may decompress to (a hostile file's claim
/// is not believed).
const MAX_SECTION: u64 = 256 << 20;

/// The first result's slot of each function of `path` that starts at one
/// of `starts` and has a result, by start. Empty where the file has no
/// DWARF (stripped) or it does not read.
pub fn result_slots(path: &Path, starts: &[u64], word: u64, lr: bool) -> HashMap<u64, Slot> {
    let Ok(data) = std::fs::read(path) else {
        return HashMap::new();
    };
    let Ok(file) = object::File::parse(&*data) else {
        return HashMap::new();
    };
    read(&file, starts, word, lr).unwrap_or_default()
}

/// A debug section's bytes, decompressed (`SHF_COMPRESSED` or GNU's
/// `.zdebug_`), or empty when the file has none.
fn section<'a>(file: &object::File<'a>, name: &str) -> Result<Cow<'a, [u8]>, gimli::Error> {
    let Some(s) = file.section_by_name(name) else {
        return Ok(Cow::Borrowed(&[]));
    };
    let bad = |_| gimli::Error::Io;
    let c = s.compressed_data().map_err(bad)?;
    match c.format {
        object::CompressionFormat::None => Ok(Cow::Borrowed(c.data)),
        object::CompressionFormat::Zlib => {
            // Grown as it comes, not sized by the header's claim.
            let mut out = Vec::new();
            flate2::read::ZlibDecoder::new(c.data)
                .take(MAX_SECTION)
                .read_to_end(&mut out)
                .map_err(|_| gimli::Error::Io)?;
            Ok(Cow::Owned(out))
        }
        _ => Err(gimli::Error::Io),
    }
}

type Slice<'a> = EndianSlice<'a, RunTimeEndian>;

/// A parameter as DWARF gives it.
struct Param {
    /// A result (`DW_AT_variable_parameter`).
    result: bool,
    /// Its offset from the CFA, if its place is one.
    at: Option<u64>,
    /// Its type's entry, by `.debug_info` offset (Go's types are in a
    /// unit of their own).
    ty: Option<usize>,
}

/// A type entry: its size, or the type it names (a typedef).
enum Type {
    Size(u64),
    Names(usize),
}

fn read(
    file: &object::File,
    starts: &[u64],
    word: u64,
    lr: bool,
) -> Result<HashMap<u64, Slot>, gimli::Error> {
    let endian = if file.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let owned = gimli::DwarfSections::load(|id| section(file, id.name()))?;
    let dwarf = owned.borrow(|s| EndianSlice::new(s, endian));
    let starts: std::collections::HashSet<u64> = starts.iter().copied().collect();
    let mut funcs: HashMap<u64, Vec<Param>> = HashMap::new();
    let mut types: HashMap<usize, Type> = HashMap::new();
    let mut units = dwarf.units();
    while let Some(header) = units.next()? {
        let unit = dwarf.unit(header)?;
        let global = |r: Option<AttributeValue<Slice>>| match r {
            Some(AttributeValue::UnitRef(o)) => o.to_debug_info_offset(&unit.header).map(|o| o.0),
            Some(AttributeValue::DebugInfoRef(o)) => Some(o.0),
            _ => None,
        };
        let mut entries = unit.entries();
        let mut depth = 0isize;
        // The wanted function being read: its start and depth.
        let mut func: Option<(u64, isize)> = None;
        while let Some((delta, e)) = entries.next_dfs()? {
            depth += delta;
            if func.is_some_and(|(_, d)| depth <= d) {
                func = None;
            }
            match e.tag() {
                gimli::DW_TAG_subprogram => {
                    if let Some(AttributeValue::Addr(a)) = e.attr_value(gimli::DW_AT_low_pc)? {
                        if starts.contains(&a) {
                            func = Some((a, depth));
                            funcs.insert(a, Vec::new());
                        }
                    }
                }
                gimli::DW_TAG_formal_parameter => {
                    if let Some((start, d)) = func {
                        if depth == d + 1 {
                            let p = Param {
                                result: matches!(
                                    e.attr_value(gimli::DW_AT_variable_parameter)?,
                                    Some(AttributeValue::Flag(true))
                                ),
                                at: frame_offset(&dwarf, &unit, e)?,
                                ty: global(e.attr_value(gimli::DW_AT_type)?),
                            };
                            funcs.entry(start).or_default().push(p);
                        }
                    }
                }
                _ => {
                    let Some(at) = e.offset().to_debug_info_offset(&unit.header) else {
                        continue;
                    };
                    if let Some(size) = e.attr_value(gimli::DW_AT_byte_size)? {
                        if let Some(size) = size.udata_value() {
                            types.insert(at.0, Type::Size(size));
                        }
                    } else if e.tag() == gimli::DW_TAG_pointer_type {
                        // Go gives its pointers no size (channels and
                        // maps are typedefs of them): a word.
                        types.insert(at.0, Type::Size(word));
                    } else if e.tag() == gimli::DW_TAG_typedef {
                        if let Some(to) = global(e.attr_value(gimli::DW_AT_type)?) {
                            types.insert(at.0, Type::Names(to));
                        }
                    }
                }
            }
        }
    }
    // The bytes of a type (through typedefs, a few deep).
    let size = |mut ty: Option<usize>| {
        for _ in 0..8 {
            match types.get(&ty?)? {
                Type::Size(s) => return Some(*s),
                Type::Names(to) => ty = Some(*to),
            }
        }
        None
    };
    let mut out = HashMap::new();
    for (start, params) in funcs {
        let mut f = Params::default();
        for p in params {
            f.add(p.result, p.at, size(p.ty));
        }
        if let Some(s) = f.first_result(word, lr) {
            out.insert(start, s);
        }
    }
    Ok(out)
}

/// A function's parameters, as far as its first result's place needs them.
#[derive(Default)]
struct Params {
    /// The arguments in order: each one's offset from the CFA if DWARF
    /// gives a place, and its size if known.
    args: Vec<(Option<u64>, Option<u64>)>,
    /// The first result's own place, if DWARF gives it, and its size; or
    /// `Err` where its size is unknown.
    result: Option<Result<(Option<u64>, u64), ()>>,
}

impl Params {
    fn add(&mut self, is_result: bool, at: Option<u64>, size: Option<u64>) {
        if !is_result {
            self.args.push((at, size));
        } else if self.result.is_none() {
            self.result = Some(size.map(|s| (at, s)).ok_or(()));
        }
    }

    /// Where the arguments end, from the CFA. ABI0 lays them out in order,
    /// each aligned: an argument the compiler dropped (unused, so DWARF
    /// gives it no place) still has its slot, at the end of the one before
    /// it aligned to its own size (a word at most: Go aligns no argument
    /// further here). Its size alone then places it; a size that says
    /// nothing sure of its alignment (an odd-sized struct), or none, does
    /// not.
    fn args_end(&self, word: u64, lr: bool) -> Option<u64> {
        let mut end = if lr { word } else { 0 };
        for &(at, size) in &self.args {
            let size = size?;
            end = match at {
                Some(at) => at + size,
                None if size == 0 => end,
                None => {
                    let align = if size >= word && size % word == 0 {
                        word
                    } else if size < word && size.is_power_of_two() {
                        size
                    } else {
                        return None;
                    };
                    end.div_ceil(align) * align + size
                }
            };
        }
        Some(end)
    }

    fn first_result(&self, word: u64, lr: bool) -> Option<Slot> {
        let (at, size) = self.result?.ok()?;
        let offset = match at {
            Some(at) => at,
            None => self.args_end(word, lr)?.div_ceil(word) * word,
        };
        Some(Slot {
            offset,
            len: size.clamp(1, word),
        })
    }
}

/// A parameter's offset from the CFA: its location's `DW_OP_fbreg` (Go's
/// frame base is the CFA; `DW_OP_call_frame_cfa` for offset 0), or the
/// first of several in a row, each a `DW_OP_piece` on from the last.
/// Anything else (a register, a piece elsewhere) is no place.
fn frame_offset(
    dwarf: &gimli::Dwarf<Slice>,
    unit: &gimli::Unit<Slice>,
    e: &gimli::DebuggingInformationEntry<Slice>,
) -> Result<Option<u64>, gimli::Error> {
    let Some(loc) = e.attr_value(gimli::DW_AT_location)? else {
        return Ok(None);
    };
    let expr = match loc {
        AttributeValue::Exprloc(x) => x,
        other => match dwarf.attr_locations(unit, other)? {
            Some(mut list) => match list.next()? {
                Some(entry) => entry.data,
                None => return Ok(None),
            },
            None => return Ok(None),
        },
    };
    let mut ops = expr.operations(unit.encoding());
    // One place, or pieces in a row (a slice's pointer, length and
    // capacity): where the first starts.
    let mut first = None;
    // Where the next piece must start, once a piece ended.
    let mut next: Option<u64> = None;
    // The place just read, waiting for its piece's size.
    let mut open: Option<u64> = None;
    while let Some(op) = ops.next()? {
        let at = match op {
            gimli::Operation::FrameOffset { offset } => u64::try_from(offset).ok(),
            // Offset 0 (i386's first argument).
            gimli::Operation::CallFrameCFA => Some(0),
            gimli::Operation::Piece {
                size_in_bits,
                bit_offset: None,
            } if size_in_bits % 8 == 0 => {
                let Some(at) = open.take() else {
                    return Ok(None);
                };
                next = Some(at + size_in_bits / 8);
                continue;
            }
            _ => None,
        };
        let Some(at) = at else {
            return Ok(None);
        };
        if open.is_some() || next.is_some_and(|n| n != at) {
            return Ok(None);
        }
        first = first.or(Some(at));
        open = Some(at);
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_result_follows_the_arguments() {
        let p = |args: &[(Option<u64>, Option<u64>)], result| Params {
            args: args.to_vec(),
            result: Some(Ok(result)),
        };
        let at = |o: u64, s: u64| (Some(o), Some(s));
        // mix(a, b, c int) int on o32: arguments at 4, 8, 12.
        let mix = [at(4, 4), at(8, 4), at(12, 4)];
        let s = p(&mix, (None, 4)).first_result(4, true);
        assert_eq!(s, Some(Slot { offset: 16, len: 4 }));
        // A byte argument ends unaligned: the result is pointer-aligned.
        let s = p(&[at(8, 1)], (None, 8)).first_result(8, true);
        assert_eq!(s, Some(Slot { offset: 16, len: 8 }));
        // An int64 result on a 32-bit guest: its first word.
        let s = p(&[at(4, 4)], (None, 8)).first_result(4, true);
        assert_eq!(s, Some(Slot { offset: 8, len: 4 }));
        // No arguments: after the saved return address's slot (LR), at
        // the CFA (i386).
        let none = p(&[], (None, 4));
        assert_eq!(none.first_result(4, true).unwrap().offset, 4);
        assert_eq!(none.first_result(4, false).unwrap().offset, 0);
        // A place DWARF gives wins.
        let s = p(&[(None, None)], (Some(20), 4)).first_result(4, true);
        assert_eq!(s, Some(Slot { offset: 20, len: 4 }));
        // An unused argument has no place but keeps its slot: relay(id,
        // round int, in, next chan int) with `round` unused, on o32 and
        // on mips64el; last, or between others.
        let relay = [at(4, 4), (None, Some(4)), at(12, 4), at(16, 4)];
        let s = p(&relay, (None, 4)).first_result(4, true);
        assert_eq!(s, Some(Slot { offset: 20, len: 4 }));
        let last = [at(8, 8), (None, Some(8))];
        let s = p(&last, (None, 8)).first_result(8, true);
        assert_eq!(s, Some(Slot { offset: 24, len: 8 }));
        // A byte, then an unplaced int32 aligned to 4, then a string.
        let mixed = [at(8, 1), (None, Some(4)), (None, Some(16))];
        let s = p(&mixed, (None, 8)).first_result(8, true);
        assert_eq!(s, Some(Slot { offset: 32, len: 8 }));
        // An unplaced argument whose alignment its size does not tell, or
        // whose size is unknown: no place for the result.
        for lost in [(None, Some(3)), (None, None), (Some(4), None)] {
            let s = p(&[at(4, 4), lost], (None, 4)).first_result(4, true);
            assert_eq!(s, None, "{lost:?}");
        }
        // A result of unknown size; no result.
        let unknown = Params {
            args: mix.to_vec(),
            result: Some(Err(())),
        };
        assert_eq!(unknown.first_result(4, true), None);
        let none = Params {
            args: mix.to_vec(),
            result: None,
        };
        assert_eq!(none.first_result(4, true), None);
    }
}
