//! The backtrace of one guest thread, updated instruction by instruction in
//! execution order: the blog's `BacktraceState` (backtrace, return-address
//! stack, branch flag), made exact for recursion.
//!
//! The walkthrough's algorithm: when a branch executes, raise the branch
//! flag; at the next instruction, look at where the branch went:
//!
//! * it **called** a function (the branch left a return address: see
//!   [`crate::backtrace::arch`]): push a frame, and the return address on the return
//!   stack;
//! * it went to a **return address** on the return stack (with the stack
//!   pointer the caller had): pop that frame, and keep popping while the new
//!   top expects the same return too. That loop is what makes tail calls
//!   work: a MIPS `b f` or RISC-V `j f` or x86 `jmp f` at the end of a
//!   function enters `f` as a new frame that returns where its caller would
//!   have, so the one `jr ra` / `ret` at the end of `f` leaves both;
//! * it **jumped to the first instruction of another function** without
//!   leaving a return address: a tail call, pushed as above, with the return
//!   address of the frame it replaces;
//! * anything else (loops, ifs, switches, a fall-through) changes nothing.
//!
//! The blog's return stack holds addresses only, so a recursive function
//! returning to itself popped every recursive frame at once. Here each entry
//! also holds the stack pointer the caller will have after the return (the
//! one at the callee's entry, plus 8 on x86_64 and 4 on i386), which tells recursive frames
//! apart and keeps a jump to the instruction after a call site (a join point)
//! inside a recursive callee from passing for a return.

use std::sync::Arc;

use crate::backtrace::arch::{is_ppc_call, Link, Rules};

/// How a frame was entered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The thread's first instruction was in it.
    Start,
    /// A call (the branch left a return address).
    Call,
    /// A jump to its first instruction (a tail call).
    Jump,
    /// A signal handler, run by a signal's delivery.
    Signal,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Start => "start",
            Via::Call => "call",
            Via::Jump => "jump",
            Via::Signal => "signal",
        }
    }
}

/// One entry of the backtrace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The function's name, or its address if it has none.
    pub name: Arc<str>,
    /// The first instruction executed in it.
    pub entry: u64,
    pub via: Via,
}

/// One entry of the return stack: where the frame returns to, and the stack
/// pointer after that return. `None`: unknown (the root frame has no return
/// address; a landing without registers gives no stack pointer).
///
/// An unknown address with a known stack pointer matches any address: an
/// x86_64 signal handler returns to the restorer its delivery pushed, which
/// no event shows, but only its `ret` leaves the stack pointer 8 above the
/// one at its entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Return {
    pub addr: Option<u64>,
    pub sp: Option<u64>,
}

impl Return {
    fn matches(&self, pc: u64, sp: Option<u64>) -> bool {
        match (self.addr, self.sp, sp) {
            (Some(a), Some(s), Some(t)) => a == pc && s == t,
            (Some(a), _, _) => a == pc,
            (None, Some(s), Some(t)) => s == t,
            (None, _, _) => false,
        }
    }
}

/// The branch flag, with what is known about the branch so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Branch {
    /// The flagged instruction (MIPS: moved on to the delay slot).
    pub pc: u64,
    /// MIPS: `pc` was moved on to the instruction after the flagged one.
    pub in_slot: bool,
    /// The stack pointer before it (when it had registers).
    pub sp: Option<u64>,
    /// The return address it pushed (x86_64 `call`).
    pub pushed: Option<u64>,
}

/// Registers the tracer reads at an instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Regs {
    pub ra: Option<u64>,
    pub sp: u64,
}

/// What changed, reported after the change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The top frame was entered from the branch instruction at `from`
    /// (`None` for the first frame), and will return to `ret`.
    Enter { from: Option<u64>, ret: Option<u64> },
    /// `frame` was left: execution goes on at `pc`, after the branch
    /// instruction at `from`.
    Exit { frame: Frame, pc: u64, from: u64 },
}

/// A function, at run-time addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// Its first address (its symbol's value).
    pub start: u64,
    /// Where a call from code sharing its TOC enters it: PowerPC ELFv2's
    /// local entry point, past the two instructions that set up r2 (the
    /// same as `start` elsewhere).
    pub local_entry: u64,
    pub name: Arc<str>,
}

/// What the tracer knows about the guest's code: the function containing
/// an address, and, where the registers do not tell a call from a jump,
/// the instructions themselves.
pub trait Symbolize {
    /// The function containing `pc`.
    fn function(&self, pc: u64) -> Option<Function>;

    /// The start and the local entry point of the function containing
    /// `pc`, without its name: what every taken branch's landing is
    /// checked against (a tail call), so an implementation may answer it
    /// without building a [`Function`].
    fn entries(&self, pc: u64) -> Option<(u64, u64)> {
        self.function(pc).map(|f| (f.start, f.local_entry))
    }

    /// A name for `pc` when no function contains it.
    fn unnamed(&self, pc: u64) -> Arc<str> {
        format!("{pc:#x}").into()
    }

    /// The length of the instruction at `pc`, as QEMU reported it when it
    /// translated it: then the return address of a call and the
    /// fall-through of a branch are exactly that far past it.
    fn insn_len(&self, _pc: u64) -> Option<u64> {
        None
    }

    /// The 4-byte instruction word at `pc` in the guest's byte order, from
    /// the file mapped there (PowerPC: the encoding tells a call).
    fn insn_word(&self, _pc: u64) -> Option<u32> {
        None
    }
}

/// The backtrace of one guest thread: the walkthrough's state.
#[derive(Debug, Default, Clone)]
pub struct BacktraceState {
    /// Outermost first.
    pub backtrace: Vec<Frame>,
    /// One entry per frame, in step with `backtrace`.
    return_stack: Vec<Return>,
    /// A bit ([`ret_slot`]) for the return address of every frame on
    /// `return_stack`: a landing whose bit is clear returns to none of
    /// them, told without a look through the stack (most landings are a
    /// branch inside a function).
    ret_filter: u64,
    /// How many frames' return addresses have each bit of `ret_filter`
    /// (64 counts once a frame was pushed), so that a return clears its
    /// bit without a look through the stack either (a deep recursion
    /// unwinds in time linear in its depth).
    ret_counts: Vec<u32>,
    /// Frames on `return_stack` that expect their return by the stack
    /// pointer alone (no return address known).
    by_sp: usize,
    /// Set by a branch; the next instruction shows where it went.
    pub branch_flag: Option<Branch>,
    /// The first instruction has been seen.
    started: bool,
    /// A signal is being delivered to this handler: its first instruction
    /// comes next.
    signal: Option<u64>,
    /// Landings that had no registers (the hook library could not tell the
    /// block start): decided on addresses alone.
    pub blind_landings: u64,
    /// Set by [`BacktraceState::unnamed`]: every frame's name is this one
    /// (empty) string, and no symbol is looked up for it.
    no_names: Option<Arc<str>>,
}

impl BacktraceState {
    /// A state whose frames are not named: for a user that names what it
    /// shows from the return addresses itself (`cannoli heap`, at its few
    /// findings and allocations), a stripped program's every call would
    /// otherwise format a name nobody reads.
    pub fn unnamed() -> BacktraceState {
        BacktraceState {
            no_names: Some(Arc::from("")),
            ..BacktraceState::default()
        }
    }

    /// The name of the function entered at `pc`, unless frames are not
    /// named.
    fn frame_name(&self, syms: &impl Symbolize, pc: u64) -> Arc<str> {
        match &self.no_names {
            Some(none) => none.clone(),
            None => name_of(syms, pc),
        }
    }

    pub fn depth(&self) -> usize {
        self.backtrace.len()
    }

    /// The backtrace as names, outermost first.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.backtrace.iter().map(|f| f.name.as_ref())
    }

    /// What each frame expects its return to look like, outermost first.
    pub fn return_stack(&self) -> &[Return] {
        &self.return_stack
    }

    fn push(&mut self, frame: Frame, ret: Return) {
        self.backtrace.push(frame);
        match ret.addr {
            Some(a) => {
                if self.ret_counts.is_empty() {
                    self.ret_counts = vec![0; 64];
                }
                let k = ret_slot(a);
                self.ret_counts[k] += 1;
                self.ret_filter |= 1 << k;
            }
            None if ret.sp.is_some() => self.by_sp += 1,
            None => {}
        }
        self.return_stack.push(ret);
    }

    fn pop(&mut self) -> Option<(Frame, Return)> {
        let popped = (self.backtrace.pop()?, self.return_stack.pop()?);
        match popped.1.addr {
            Some(a) => {
                // Pushed with this address, so its count is at least 1.
                let k = ret_slot(a);
                self.ret_counts[k] -= 1;
                if self.ret_counts[k] == 0 {
                    self.ret_filter &= !(1 << k);
                }
            }
            None if popped.1.sp.is_some() => self.by_sp -= 1,
            None => {}
        }
        Some(popped)
    }

    /// Whether some frame may expect a return to `pc` (false: none does).
    fn may_return_to(&self, pc: u64) -> bool {
        self.by_sp > 0 || self.ret_filter & (1 << ret_slot(pc)) != 0
    }

    /// An instruction at `pc` is about to run. `branch`: it can end a basic
    /// block. `regs`: the registers before it, if the event carried them.
    /// Inlined: a call-stack tool's serial phase runs it for most events.
    #[inline(always)]
    pub fn insn(
        &mut self,
        rules: &Rules,
        syms: &impl Symbolize,
        pc: u64,
        branch: bool,
        regs: Option<Regs>,
        out: &mut impl FnMut(&Change, &BacktraceState),
    ) {
        if !self.started {
            self.started = true;
            let name = self.frame_name(syms, pc);
            self.push(
                Frame {
                    name,
                    entry: pc,
                    via: Via::Start,
                },
                Return {
                    addr: None,
                    sp: None,
                },
            );
            out(
                &Change::Enter {
                    from: None,
                    ret: None,
                },
                self,
            );
        }
        if let Some(handler) = self.signal.take() {
            if pc == handler {
                self.enter_handler(rules, syms, pc, regs, out);
            }
        }
        if let Some(b) = self.branch_flag.take() {
            if rules.delay_slot && !b.in_slot && !branch && pc == b.pc.wrapping_add(4) {
                // The delay slot of a flagged branch, or the fall-through of
                // a flagged delay slot: the next instruction tells.
                self.branch_flag = Some(Branch {
                    pc,
                    in_slot: true,
                    ..b
                });
                return;
            }
            self.land(rules, syms, b, pc, regs, out);
        }
        if branch {
            self.branch_flag = Some(Branch {
                pc,
                in_slot: false,
                sp: regs.map(|r| r.sp),
                pushed: None,
            });
        }
    }

    /// A signal is being delivered: `handler` runs next. A branch whose
    /// target the delivery pre-empted is forgotten.
    pub fn signal(&mut self, handler: u64) {
        self.branch_flag = None;
        self.signal = Some(handler);
    }

    /// A signal handler's first instruction: a frame that returns where
    /// the handler's return goes (MIPS, RISC-V: `ra`, set to the signal
    /// trampoline; x86_64: whatever `ret` pops).
    fn enter_handler(
        &mut self,
        rules: &Rules,
        syms: &impl Symbolize,
        pc: u64,
        regs: Option<Regs>,
        out: &mut impl FnMut(&Change, &BacktraceState),
    ) {
        let ret = match (rules.link, regs) {
            (Link::Register { .. }, Some(r)) => Return {
                addr: r.ra.map(|ra| rules.return_address(ra)),
                sp: Some(r.sp),
            },
            (Link::Stack { .. }, Some(r)) => Return {
                addr: None,
                sp: Some(r.sp.wrapping_add(rules.ret_pop)),
            },
            // PowerPC: the handler returns to LR, which the trace does not
            // carry, with the stack pointer it started with, which every
            // jump inside a frameless handler has too. Left when a frame
            // below it returns.
            (Link::Encoding, _) | (_, None) => Return {
                addr: None,
                sp: None,
            },
        };
        let name = self.frame_name(syms, pc);
        self.push(
            Frame {
                name,
                entry: pc,
                via: Via::Signal,
            },
            ret,
        );
        out(
            &Change::Enter {
                from: None,
                ret: ret.addr,
            },
            self,
        );
    }

    /// The instruction at `pc` stored `size` bytes of `val` at `addr`: on
    /// x86, a branch storing a return address's worth of bytes just below
    /// the stack pointer is a `call`.
    pub fn write(&mut self, rules: &Rules, pc: u64, addr: u64, val: u64, size: u8) {
        let width = rules.ret_pop;
        if let Some(b) = &mut self.branch_flag {
            if b.pc == pc
                && u64::from(size) == width
                && b.sp.map_or(true, |sp| addr == sp.wrapping_sub(width))
            {
                b.pushed = Some(val);
            }
        }
    }

    /// The branch `b` went to `pc`; `regs` are the registers after it.
    fn land(
        &mut self,
        rules: &Rules,
        syms: &impl Symbolize,
        b: Branch,
        pc: u64,
        regs: Option<Regs>,
        out: &mut impl FnMut(&Change, &BacktraceState),
    ) {
        let from = b.pc.wrapping_sub(rules.insn_back);
        // The address after the flagged instruction: exact where QEMU told
        // its length, else one of the architecture's candidates.
        let len = syms.insn_len(b.pc);
        let after = |addr: u64, candidates: &[u64]| match len {
            Some(n) => b.pc.wrapping_add(n) == addr,
            None => candidates.iter().any(|&d| b.pc.wrapping_add(d) == addr),
        };
        let link = match rules.link {
            Link::Register { offsets } => regs
                .and_then(|r| r.ra)
                .map(|ra| rules.return_address(ra))
                .filter(|&ra| after(ra, offsets)),
            Link::Stack { offsets } => b.pushed.filter(|&ret| after(ret, offsets)),
            Link::Encoding => syms
                .insn_word(b.pc)
                .filter(|&w| is_ppc_call(w))
                .map(|_| b.pc.wrapping_add(4)),
        }
        // A call to the next instruction (reading the pc) returns nowhere.
        .filter(|&ret| ret != pc);
        let sp = regs.map(|r| r.sp);

        if let Some(ret) = link {
            let name = self.frame_name(syms, pc);
            self.push(
                Frame {
                    name,
                    entry: pc,
                    via: Via::Call,
                },
                Return {
                    addr: Some(ret),
                    sp: sp.map(|s| s.wrapping_add(rules.ret_pop)),
                },
            );
            out(
                &Change::Enter {
                    from: Some(from),
                    ret: Some(ret),
                },
                self,
            );
            return;
        }
        if after(pc, rules.fallthrough) {
            return;
        }
        if regs.is_none() {
            self.blind_landings += 1;
        }

        // A return: to the innermost frame that expects it. Frames above it
        // are left without returning (longjmp and the like).
        let frame = if self.may_return_to(pc) {
            self.return_stack.iter().rposition(|r| r.matches(pc, sp))
        } else {
            None
        };
        if let Some(i) = frame {
            while self.depth() > i + 1 {
                self.exit_top(pc, from, out);
            }
            // The blog's loop: pop while the top expects this return, which
            // leaves a whole chain of tail calls at once.
            while self.return_stack.last().is_some_and(|r| r.matches(pc, sp)) {
                self.exit_top(pc, from, out);
            }
            return;
        }

        // A tail call: a jump to the first instruction (or the local entry
        // point) of another function. Most landings here are inside a
        // function (a loop's back edge): one look, by address, tells.
        if let Some((start, local_entry)) = syms.entries(pc) {
            let entered = pc == start || pc == local_entry;
            if entered && !matches!(syms.entries(b.pc), Some((s, _)) if s == start) {
                let ret = self.return_stack.last().copied().unwrap_or(Return {
                    addr: None,
                    sp: None,
                });
                self.push(
                    Frame {
                        name: self.frame_name(syms, pc),
                        entry: pc,
                        via: Via::Jump,
                    },
                    ret,
                );
                out(
                    &Change::Enter {
                        from: Some(from),
                        ret: ret.addr,
                    },
                    self,
                );
            }
        }
    }

    fn exit_top(&mut self, pc: u64, from: u64, out: &mut impl FnMut(&Change, &BacktraceState)) {
        if let Some((frame, _)) = self.pop() {
            out(&Change::Exit { frame, pc, from }, self);
        }
    }
}

/// `addr`'s bit (0 to 63) in [`BacktraceState`]'s filter of return
/// addresses.
fn ret_slot(addr: u64) -> usize {
    (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize
}

fn name_of(syms: &impl Symbolize, pc: u64) -> Arc<str> {
    match syms.function(pc) {
        Some(f) => f.name,
        None => syms.unnamed(pc),
    }
}

#[cfg(test)]
mod tests;
