// SPDX-License-Identifier: GPL-2.0-or-later
use super::*;
use crate::backtrace::arch::rules;
use crate::backtrace::symbols::Functions;
use std::collections::HashMap;

/// The functions of `table()`, and what a test says about the code:
/// local entry points, instruction lengths and words.
#[derive(Default)]
struct Code {
    funcs: Functions,
    local: HashMap<u64, u64>,
    lens: HashMap<u64, u64>,
    words: HashMap<u64, u32>,
}

impl Symbolize for Code {
    fn function(&self, pc: u64) -> Option<Function> {
        self.funcs.find(pc).map(|f| Function {
            start: f.start,
            local_entry: f.start + self.local.get(&f.start).copied().unwrap_or(0),
            name: f.name.clone(),
        })
    }

    fn insn_len(&self, pc: u64) -> Option<u64> {
        self.lens.get(&pc).copied()
    }

    fn insn_word(&self, pc: u64) -> Option<u32> {
        self.words.get(&pc).copied()
    }
}

/// Runs instructions through a `BacktraceState` over `table()`,
/// logging each change as `fmt` renders it.
struct Trace {
    rules: Rules,
    syms: Code,
    st: BacktraceState,
    log: Vec<String>,
    fmt: fn(&Change, &BacktraceState) -> String,
}

impl Trace {
    fn new(arch: &str, fmt: fn(&Change, &BacktraceState) -> String) -> Self {
        Trace {
            rules: rules(arch).unwrap(),
            syms: Code {
                funcs: table(),
                ..Code::default()
            },
            st: BacktraceState::default(),
            log: Vec::new(),
            fmt,
        }
    }

    /// Runs a script of (pc, branch, ra, sp) instructions.
    fn steps(&mut self, steps: &[(u64, bool, Option<u64>, u64)]) {
        let Trace {
            rules,
            syms,
            st,
            log,
            fmt,
        } = self;
        for &(pc, br, ra, sp) in steps {
            st.insn(rules, syms, pc, br, Some(Regs { ra, sp }), &mut |c, s| {
                log.push(fmt(c, s))
            });
        }
    }

    /// Runs a script of (pc, branch, sp) instructions without a link
    /// register (x86).
    fn steps_sp(&mut self, steps: &[(u64, bool, u64)]) {
        for &(pc, br, sp) in steps {
            self.steps(&[(pc, br, None, sp)]);
        }
    }
}

/// "+name" / "-name".
fn names(c: &Change, s: &BacktraceState) -> String {
    match c {
        Change::Enter { .. } => format!("+{}", s.backtrace.last().unwrap().name),
        Change::Exit { frame, .. } => format!("-{}", frame.name),
    }
}

/// Runs a script of (pc, branch, ra, sp) instructions over `table()`
/// and checks the changes, as "+name" / "-name" strings.
fn check(arch: &str, steps: &[(u64, bool, u64, u64)], expect: &[&str]) {
    let mut t = Trace::new(arch, names);
    for &(pc, br, ra, sp) in steps {
        t.steps(&[(pc, br, Some(ra), sp)]);
    }
    assert_eq!(t.log, expect);
}

/// "+name ret" / "-name pc", addresses in hex.
fn names_and_addresses(c: &Change, s: &BacktraceState) -> String {
    match c {
        Change::Enter { ret, .. } => {
            let r = ret.map_or("-".to_string(), |r| format!("{r:x}"));
            format!("+{} {r}", s.backtrace.last().unwrap().name)
        }
        Change::Exit { frame, pc, .. } => format!("-{} {pc:x}", frame.name),
    }
}

fn table() -> Functions {
    Functions::from_list(&[
        (0x1000, 0x100, "main"),
        (0x2000, 0x100, "f"),
        (0x3000, 0x100, "g"),
        (0x4000, 0x100, "h"),
    ])
}

#[test]
fn riscv_call_and_return() {
    // main: jal f at 0x1010 (ra := 0x1014); f returns with ret.
    check(
        "riscv64",
        &[
            (0x1000, false, 0, 0x800),
            (0x1010, true, 0, 0x800),
            (0x2000, false, 0x1014, 0x800),
            (0x2004, false, 0x1014, 0x7f0),
            (0x2008, true, 0x1014, 0x800),
            (0x1014, false, 0x1014, 0x800),
        ],
        &["+main", "+f", "-f"],
    );
}

#[test]
fn recursion_pops_one_frame_per_return() {
    // f calls itself at 0x2010 (return to 0x2014) twice, each time with
    // a 16-byte frame; then three returns.
    check(
        "riscv64",
        &[
            (0x1000, false, 0, 0x800),
            (0x1010, true, 0, 0x800),
            (0x2000, false, 0x1014, 0x800),
            (0x2010, true, 0x1014, 0x7f0),
            (0x2000, false, 0x2014, 0x7f0),
            (0x2010, true, 0x2014, 0x7e0),
            (0x2000, false, 0x2014, 0x7e0),
            // A join-point jump inside the innermost f to 0x2014 (the
            // instruction after the recursive call) while its frame is
            // still allocated: not a return.
            (0x2008, true, 0x2014, 0x7d0),
            (0x2014, false, 0x2014, 0x7d0),
            (0x2018, true, 0x2014, 0x7e0),
            (0x2014, false, 0x2014, 0x7e0),
            (0x2018, true, 0x2014, 0x7f0),
            (0x2014, false, 0x2014, 0x7f0),
            (0x2018, true, 0x1014, 0x800),
            (0x1014, false, 0x1014, 0x800),
        ],
        &["+main", "+f", "+f", "+f", "-f", "-f", "-f"],
    );
}

#[test]
fn mips_tail_branch_chain_pops_at_once() {
    // main: bal f (delay slot 0x1014, ra := 0x1018); f: b g (delay slot
    // 0x2020); g: b h; h: bal ... no, h: jr ra (delay slot 0x4008).
    check(
        "mipsel",
        &[
            (0x1000, false, 0, 0x800),
            (0x1010, false, 0, 0x800),
            (0x1014, true, 0x1018, 0x800),
            (0x2000, false, 0x1018, 0x800),
            (0x2020, true, 0x1018, 0x800),
            (0x3000, false, 0x1018, 0x800),
            (0x3020, true, 0x1018, 0x800),
            (0x4000, false, 0x1018, 0x800),
            (0x4008, true, 0x1018, 0x7f0),
            (0x1018, false, 0x1018, 0x800),
            // A fall-through of a branch not taken changes nothing.
            (0x1020, true, 0x1018, 0x800),
            (0x1024, false, 0x1018, 0x800),
        ],
        &["+main", "+f", "+g", "+h", "-h", "-g", "-f"],
    );
}

#[test]
fn mips_with_the_branch_flagged_instead_of_its_delay_slot() {
    // The same program as above, but QEMU flags the branch instructions
    // (bal f at 0x1010, b g at 0x201c, jr ra at 0x3004): the delay slot
    // comes next, then the target.
    check(
        "mipsel",
        &[
            (0x1000, false, 0, 0x800),
            (0x1010, true, 0, 0x800),
            (0x1014, false, 0x1018, 0x800),
            (0x2000, false, 0x1018, 0x800),
            (0x201c, true, 0x1018, 0x800),
            (0x2020, false, 0x1018, 0x800),
            (0x3000, false, 0x1018, 0x800),
            (0x3004, true, 0x1018, 0x7f0),
            (0x3008, false, 0x1018, 0x7f0),
            (0x1018, false, 0x1018, 0x800),
            // Not taken: delay slot, then the fall-through.
            (0x1020, true, 0x1018, 0x800),
            (0x1024, false, 0x1018, 0x800),
            (0x1028, false, 0x1018, 0x800),
            // A recursive call lands on the function's own first
            // instruction: a call, not a loop.
            (0x102c, true, 0x1018, 0x800),
            (0x1030, false, 0x1034, 0x800),
            (0x1000, false, 0x1034, 0x800),
        ],
        &["+main", "+f", "+g", "-g", "-f", "+main"],
    );
}

#[test]
fn x86_call_is_a_push_by_the_branch() {
    let mut t = Trace::new("x86_64", |c, s| match c {
        Change::Enter { ret, .. } => {
            format!("+{} {:x?}", s.backtrace.last().unwrap().name, ret)
        }
        Change::Exit { frame, pc, .. } => format!("-{} {pc:x}", frame.name),
    });
    // call f at 0x1010: pushes 0x1015 at 0x7f8.
    t.steps_sp(&[(0x1000, false, 0x800), (0x1010, true, 0x800)]);
    let rules = t.rules;
    t.st.write(&rules, 0x1010, 0x7f8, 0x1015, 8);
    t.steps_sp(&[
        (0x2000, false, 0x7f8),
        // jmp g (tail call), g: a loop back to its own start, then ret.
        (0x2004, true, 0x7f8),
        (0x3000, true, 0x7f8),
        (0x3000, false, 0x7f8),
        (0x3008, true, 0x7f8),
        (0x1015, false, 0x800),
    ]);
    assert_eq!(
        t.log,
        [
            "+main None",
            "+f Some(1015)",
            "+g Some(1015)",
            "-g 1015",
            "-f 1015"
        ]
    );
    assert_eq!(t.st.depth(), 1);
}

#[test]
fn signal_handlers_are_frames() {
    let mut t = Trace::new("x86_64", |c, s| match c {
        Change::Enter { .. } => {
            let f = s.backtrace.last().unwrap();
            format!("+{} {}", f.name, f.via.as_str())
        }
        Change::Exit { frame, .. } => format!("-{}", frame.name),
    });
    // A syscall in main, then the signal: handler g, which jumps
    // within itself (same stack pointer), returns (8 above) to the
    // restorer h (a function of its own), whose sigreturn resumes main.
    t.steps_sp(&[(0x1000, false, 0x800), (0x1010, true, 0x800)]);
    t.st.signal(0x3000);
    t.steps_sp(&[
        (0x3000, false, 0x600),
        (0x3008, true, 0x600),
        (0x3010, false, 0x600),
        (0x3018, true, 0x600),
        (0x4000, false, 0x608),
        (0x4004, true, 0x608),
        (0x1012, false, 0x800),
    ]);
    assert_eq!(t.log, ["+main start", "+g signal", "-g"]);
    assert_eq!(t.st.depth(), 1);

    // RISC-V: the handler returns to ra, the trampoline.
    let mut t = Trace::new("riscv64", |c, _| match c {
        Change::Enter { ret, .. } => format!("+ {ret:x?}"),
        Change::Exit { pc, .. } => format!("- {pc:x}"),
    });
    t.steps(&[(0x1000, false, Some(0), 0x800)]);
    t.st.signal(0x3000);
    t.steps(&[
        (0x3000, false, Some(0x9000), 0x600),
        (0x3008, true, Some(0x9000), 0x600),
        (0x9000, false, Some(0x9000), 0x600),
    ]);
    assert_eq!(t.log, ["+ None", "+ Some(9000)", "- 9000"]);
}

#[test]
fn arm_thumb_calls_set_the_interworking_bit() {
    // Thumb main: `bl f` (4 bytes) at 0x1010, lr := 0x1015. f: `push
    // {r4, lr}`, then `blx r3` (2 bytes) at 0x2008 to g, lr := 0x200b;
    // g: a conditional instruction that falls through (2 bytes), then
    // `b.w h` (a tail call); h returns with `bx lr` to 0x200a; f
    // returns with `pop {r4, pc}` to 0x1014.
    let mut t = Trace::new("armv5tel", names_and_addresses);
    t.steps(&[
        (0x1000, false, Some(0), 0x800),
        (0x1010, true, Some(0), 0x800),
        (0x2000, false, Some(0x1015), 0x800),
        (0x2008, true, Some(0x1015), 0x7f8),
        (0x3000, false, Some(0x200b), 0x7f8),
        (0x3004, true, Some(0x200b), 0x7f8),
        (0x3006, false, Some(0x200b), 0x7f8),
        (0x300a, true, Some(0x200b), 0x7f8),
        (0x4000, false, Some(0x200b), 0x7f8),
        (0x4010, true, Some(0x200b), 0x7f8),
        (0x200a, false, Some(0x200b), 0x7f8),
        (0x2010, true, Some(0x200b), 0x7f8),
        (0x1014, false, Some(0x200b), 0x800),
    ]);
    assert_eq!(
        t.log,
        ["+main -", "+f 1014", "+g 200a", "+h 200a", "-h 200a", "-g 200a", "-f 1014"]
    );
    // A32 code (no interworking bit): `bl` at 0x1010, lr := 0x1014.
    check(
        "arm",
        &[
            (0x1000, false, 0, 0x800),
            (0x1010, true, 0, 0x800),
            (0x2000, false, 0x1014, 0x800),
            (0x2004, true, 0x1014, 0x800),
            (0x1014, false, 0x1014, 0x800),
        ],
        &["+main", "+f", "-f"],
    );
}

#[test]
fn aarch64_bl_and_ret() {
    check(
        "aarch64",
        &[
            (0x1000, false, 0, 0x800),
            (0x1010, true, 0, 0x800),
            (0x2000, false, 0x1014, 0x800),
            // blr x1 to g.
            (0x2008, true, 0x1014, 0x7f0),
            (0x3000, false, 0x200c, 0x7f0),
            (0x3004, true, 0x200c, 0x7f0),
            (0x200c, false, 0x200c, 0x7f0),
            (0x2010, true, 0x1014, 0x800),
            (0x1014, false, 0x1014, 0x800),
        ],
        &["+main", "+f", "+g", "-g", "-f"],
    );
}

#[test]
fn reported_lengths_make_the_return_address_exact() {
    // RISC-V: a 4-byte jump at 0x2010 with ra = 0x2012, which a 2-byte
    // call there would have left. Without the length that is a call;
    // with it, a jump within f.
    let steps = [
        (0x1000, false, Some(0), 0x800),
        (0x1010, true, Some(0), 0x800),
        (0x2000, false, Some(0x1014), 0x800),
        (0x2010, true, Some(0x2012), 0x800),
        (0x2040, false, Some(0x2012), 0x800),
    ];
    let mut t = Trace::new("riscv64", names);
    t.steps(&steps);
    assert_eq!(t.log, ["+main", "+f", "+f"]);
    let mut t = Trace::new("riscv64", names);
    t.syms.lens.insert(0x2010, 4);
    t.steps(&steps);
    assert_eq!(t.log, ["+main", "+f"]);
    // And the fall-through: a 2-byte branch at 0x2010 not taken.
    let mut t = Trace::new("riscv64", names);
    t.syms.lens.insert(0x2010, 2);
    t.steps(&[
        (0x1000, false, Some(0), 0x800),
        (0x2010, true, Some(0x2012), 0x800),
        (0x2012, false, Some(0x2012), 0x800),
    ]);
    assert_eq!(t.log, ["+main"]);
}

#[test]
fn powerpc_calls_are_read_from_the_code() {
    // ppc64le: main's `bl f` at 0x1010 lands on f's local entry
    // (0x2008); f's `bctrl` at 0x2010 calls g at its global entry; g
    // tail-calls h with `b` to h's local entry; h's `blr` returns to
    // f (0x2014), f's to main (0x1014). r1 is the stack pointer; LR is
    // not in the registers.
    let mut t = Trace::new("ppc64le", names_and_addresses);
    for f in [0x2000, 0x3000, 0x4000] {
        t.syms.local.insert(f, 8);
    }
    t.syms.words.extend([
        (0x1010, 0x4800_0ff9), // bl 0x2008
        (0x2010, 0x4e80_0421), // bctrl
        (0x3010, 0x4800_0ff8), // b 0x4008
        (0x4010, 0x4e80_0020), // blr
        (0x2020, 0x4e80_0020), // blr
    ]);
    t.steps_sp(&[
        (0x1000, false, 0x800),
        (0x1010, true, 0x800),
        (0x2008, false, 0x800),
        (0x2010, true, 0x7c0),
        (0x3000, false, 0x7c0),
        (0x3010, true, 0x7c0),
        (0x4008, false, 0x7c0),
        (0x4010, true, 0x7c0),
        (0x2014, false, 0x7c0),
        (0x2020, true, 0x800),
        (0x1014, false, 0x800),
    ]);
    assert_eq!(
        t.log,
        ["+main -", "+f 1014", "+g 2014", "+h 2014", "-h 2014", "-g 2014", "-f 1014"]
    );
    // A branch whose code is unknown is no call; a jump to a local
    // entry in the same function is no tail call.
    let mut t = Trace::new("ppc64le", names);
    t.syms.local.insert(0x1000, 8);
    t.steps_sp(&[
        (0x1000, false, 0x800),
        (0x1010, true, 0x800),
        (0x2000, false, 0x800),
        (0x2010, true, 0x800),
        (0x2008, false, 0x800),
    ]);
    assert_eq!(t.log, ["+main", "+f"]);
}

#[test]
fn i386_call_pushes_four_bytes() {
    let mut t = Trace::new("i686", names_and_addresses);
    let rules = t.rules;
    // call f at 0x1010 (5 bytes): pushes 0x1015 at 0x7fc.
    t.steps_sp(&[(0x1000, false, 0x800), (0x1010, true, 0x800)]);
    t.st.write(&rules, 0x1010, 0x7fc, 0x1015, 4);
    t.steps_sp(&[(0x2000, false, 0x7fc), (0x2004, true, 0x7fc)]);
    // An 8-byte store by a branch is no i386 return address.
    t.st.write(&rules, 0x2004, 0x7f8, 0x2009, 8);
    t.steps_sp(&[
        (0x2040, false, 0x7f4),
        (0x2044, true, 0x7fc),
        (0x1015, false, 0x800),
    ]);
    assert_eq!(t.log, ["+main -", "+f 1015", "-f 1015"]);

    // The last instruction before a page boundary ends its block, so it
    // is flagged: a `push %esi` there stores esi, no return address,
    // and the next instruction (on the next page) is no callee.
    let mut t = Trace::new("i686", names);
    t.steps_sp(&[(0x1000, false, 0x800), (0x1ffc, true, 0x800)]);
    t.st.write(&rules, 0x1ffc, 0x7fc, 0x4080_0954, 4);
    t.steps_sp(&[(0x1ffd, false, 0x7fc)]);
    assert_eq!(t.log, ["+main"]);
    // With QEMU's length of the flagged instruction, only that
    // distance: a 1-byte `push` of the address 5 bytes on is none.
    let mut t = Trace::new("i686", names);
    t.syms.lens.insert(0x1ffc, 1);
    t.steps_sp(&[(0x1000, false, 0x800), (0x1ffc, true, 0x800)]);
    t.st.write(&rules, 0x1ffc, 0x7fc, 0x2001, 4);
    t.steps_sp(&[(0x1ffd, false, 0x7fc)]);
    assert_eq!(t.log, ["+main"]);
}

#[test]
fn a_longjmp_leaves_the_frames_above() {
    check(
        "riscv64",
        &[
            (0x1000, false, 0, 0x800),
            (0x1010, true, 0, 0x800),
            (0x2000, false, 0x1014, 0x800),
            (0x2010, true, 0x1014, 0x7f0),
            (0x3000, false, 0x2014, 0x7f0),
            // g jumps straight back to main's return point.
            (0x3010, true, 0x2014, 0x7e0),
            (0x1014, false, 0x2014, 0x800),
        ],
        &["+main", "+f", "+g", "-g", "-f"],
    );
}

/// The filter of return addresses never hides a frame's return (no false
/// "no frame returns there"), counts frames that share a bit, and is
/// empty again once every frame has returned.
#[test]
fn return_filter_keeps_every_frame_and_empties() {
    let mut st = BacktraceState::default();
    let frame = |entry| Frame {
        name: "f".into(),
        entry,
        via: Via::Call,
    };
    // Enough return addresses that several share a bit, some twice
    // (recursion), and one frame known by its stack pointer alone.
    let addrs: Vec<u64> = (0..200u64).map(|i| 0x40_0000 + 4 * (i % 150)).collect();
    for &a in &addrs {
        st.push(
            frame(a),
            Return {
                addr: Some(a),
                sp: Some(0x7fff_0000 - a),
            },
        );
    }
    st.push(
        frame(1),
        Return {
            addr: None,
            sp: Some(0x1000),
        },
    );
    assert!(st.may_return_to(0x1234), "a frame known by its sp alone");
    st.pop();
    for n in (0..addrs.len()).rev() {
        for &a in &addrs[..=n] {
            assert!(st.may_return_to(a), "{a:#x} hidden at depth {n}");
        }
        st.pop();
    }
    assert_eq!(st.ret_filter, 0);
    assert_eq!(st.by_sp, 0);
    assert!(!st.may_return_to(0x40_0000));
}
