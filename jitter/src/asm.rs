//! A small typed x86-64 encoder: exactly the instruction forms the spliced
//! hook code needs, each checked against a real disassembler in the tests.
//!
//! Why not a general assembler: hook code is generated once per lifted guest
//! instruction, so the encoder sits on QEMU's translation path. These forms
//! encode with a few shifts into a fixed buffer and never allocate.

/// A 64-bit general purpose register, numbered as in ModRM/REX.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[allow(missing_docs)]
pub enum Reg {
    Rax = 0,
    Rcx,
    Rdx,
    Rbx,
    Rsp,
    Rbp,
    Rsi,
    Rdi,
    R8,
    R9,
    R10,
    R11,
    R12,
    R13,
    R14,
    R15,
}

impl Reg {
    /// The register with ModRM/REX number `n` (as QEMU's TCG numbers them).
    pub fn from_num(n: u8) -> Option<Reg> {
        use Reg::*;
        const ALL: [Reg; 16] = [
            Rax, Rcx, Rdx, Rbx, Rsp, Rbp, Rsi, Rdi, R8, R9, R10, R11, R12, R13, R14, R15,
        ];
        ALL.get(n as usize).copied()
    }
    fn low(self) -> u8 {
        self as u8 & 7
    }
    fn ext(self) -> u8 {
        (self as u8 >> 3) & 1
    }
}

/// A memory operand `[base + disp]`.
#[derive(Clone, Copy, Debug)]
pub struct Mem {
    /// The base register.
    pub base: Reg,
    /// Signed byte offset from `base`.
    pub disp: i32,
}

/// `[base + disp]`.
pub fn mem(base: Reg, disp: i32) -> Mem {
    Mem { base, disp }
}

/// Writes machine code into a caller-provided buffer.
///
/// Running past the end of the buffer is a bug in the caller's size
/// estimate, so it panics rather than truncating code.
pub struct Asm<'a> {
    buf: &'a mut [u8],
    len: usize,
    /// Address the first byte will execute at, for rel32 targets.
    rx: u64,
}

/// A forward jump whose target is bound later.
#[must_use]
pub struct Fixup(usize);

/// A forward jump with a 32-bit displacement, bound later with
/// [`Asm::bind32`].
#[must_use]
pub struct Fixup32(usize);

impl<'a> Asm<'a> {
    /// An assembler writing into `buf`, whose first byte will execute at
    /// address `rx` (rel32 operands are computed from it).
    pub fn new(buf: &'a mut [u8], rx: u64) -> Self {
        Asm { buf, len: 0, rx }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether nothing has been written yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Execution address of the next byte.
    pub fn here(&self) -> u64 {
        self.rx + self.len as u64
    }

    /// Whether the code executes at the address it is written to (no split
    /// W^X mapping), so that it can patch itself.
    pub fn writable_where_it_runs(&self) -> bool {
        self.buf.as_ptr() as u64 == self.rx
    }

    fn byte(&mut self, b: u8) {
        self.buf[self.len] = b;
        self.len += 1;
    }
    fn bytes(&mut self, b: &[u8]) {
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    /// REX prefix, omitted when it would be a plain 0x40 and not needed.
    fn rex(&mut self, w: bool, reg: u8, rm: Reg) {
        let rex = 0x40 | (w as u8) << 3 | ((reg >> 3) & 1) << 2 | rm.ext();
        if rex != 0x40 {
            self.byte(rex);
        }
    }

    /// ModRM (+SIB, +disp) for `[m.base + m.disp]` with `reg` in the reg field.
    fn modrm_mem(&mut self, reg: u8, m: Mem) {
        let (md, disp8) = match m.disp {
            // rbp/r13 as base have no mod=00 form.
            0 if m.base.low() != 5 => (0b00, None),
            d if (-128..=127).contains(&d) => (0b01, Some(true)),
            _ => (0b10, Some(false)),
        };
        self.byte(md << 6 | (reg & 7) << 3 | m.base.low());
        if m.base.low() == 4 {
            // rsp/r12 as base need a SIB byte: no index, base = rsp/r12.
            self.byte(0x24);
        }
        match disp8 {
            Some(true) => self.byte(m.disp as i8 as u8),
            Some(false) => self.bytes(&m.disp.to_le_bytes()),
            None => {}
        }
    }

    /// `opcode` with a register operand `r` and a memory operand `m`
    /// (ModRM's reg and r/m fields); `w`: 64-bit (REX.W).
    fn reg_mem(&mut self, w: bool, opcode: u8, r: Reg, m: Mem) {
        self.rex(w, r as u8, m.base);
        self.byte(opcode);
        self.modrm_mem(r as u8, m);
    }

    fn modrm_reg(&mut self, reg: u8, rm: Reg) {
        self.byte(0b11 << 6 | (reg & 7) << 3 | rm.low());
    }

    /// `mov qword [m], imm32` (sign-extended to 64 bits).
    pub fn mov_m64_imm32(&mut self, m: Mem, imm: i32) {
        self.rex(true, 0, m.base);
        self.byte(0xc7);
        self.modrm_mem(0, m);
        self.bytes(&imm.to_le_bytes());
    }

    /// `mov dword [m], imm32`.
    pub fn mov_m32_imm32(&mut self, m: Mem, imm: u32) {
        self.rex(false, 0, m.base);
        self.byte(0xc7);
        self.modrm_mem(0, m);
        self.bytes(&imm.to_le_bytes());
    }

    /// `mov dword [m], src` (the low 32 bits of `src`).
    pub fn mov_m32_r(&mut self, m: Mem, src: Reg) {
        self.reg_mem(false, 0x89, src, m);
    }

    /// `mov qword [m], src`.
    pub fn mov_m64_r(&mut self, m: Mem, src: Reg) {
        self.reg_mem(true, 0x89, src, m);
    }

    /// `prefetchw [m]`: a hint to fetch the line for writing (0F 0D /1).
    /// Only for a CPU that has it (`crate::prefetch::has_prefetchw`).
    pub fn prefetchw(&mut self, m: Mem) {
        self.rex(false, 0, m.base);
        self.bytes(&[0x0f, 0x0d]);
        self.modrm_mem(1, m);
    }

    /// `push qword [m]`: with [`Asm::pop_m64`], a copy from memory to memory
    /// that clobbers no register (the word sits at the top of the stack
    /// in between, above the stack pointer, where a signal frame cannot
    /// reach it).
    pub fn push_m64(&mut self, m: Mem) {
        self.rex(false, 0, m.base);
        self.byte(0xff);
        self.modrm_mem(6, m);
    }

    /// `pop qword [m]` (`m` not based on rsp: its address would be taken
    /// after the pop).
    pub fn pop_m64(&mut self, m: Mem) {
        debug_assert!(m.base != Reg::Rsp, "pop to an rsp-based operand");
        self.rex(false, 0, m.base);
        self.byte(0x8f);
        self.modrm_mem(0, m);
    }

    /// `mov dst, qword [m]`.
    pub fn mov_r_m64(&mut self, dst: Reg, m: Mem) {
        self.reg_mem(true, 0x8b, dst, m);
    }

    /// `mov dst32, dword [m]` (zero-extends into the full register).
    pub fn mov_r32_m32(&mut self, dst: Reg, m: Mem) {
        self.reg_mem(false, 0x8b, dst, m);
    }

    /// `cmp a, qword [m]` (64-bit): flags from `a - [m]`.
    pub fn cmp_r_m64(&mut self, a: Reg, m: Mem) {
        self.reg_mem(true, 0x3b, a, m);
    }

    /// `cmp a32, dword [m]`: flags from the low halves, `a - [m]`.
    pub fn cmp_r32_m32(&mut self, a: Reg, m: Mem) {
        self.reg_mem(false, 0x3b, a, m);
    }

    /// `mov dst, src` (64-bit).
    pub fn mov_r_r(&mut self, dst: Reg, src: Reg) {
        self.rex(true, src as u8, dst);
        self.byte(0x89);
        self.modrm_reg(src as u8, dst);
    }

    /// `mov dst, imm64`.
    pub fn mov_r_imm64(&mut self, dst: Reg, imm: u64) {
        self.rex(true, 0, dst);
        self.byte(0xb8 + dst.low());
        self.bytes(&imm.to_le_bytes());
    }

    /// `mov dst32, imm32` (zero-extends into the full register).
    pub fn mov_r32_imm32(&mut self, dst: Reg, imm: u32) {
        self.rex(false, 0, dst);
        self.byte(0xb8 + dst.low());
        self.bytes(&imm.to_le_bytes());
    }

    /// `lea dst, [m]`.
    pub fn lea(&mut self, dst: Reg, m: Mem) {
        self.reg_mem(true, 0x8d, dst, m);
    }

    /// `add dst, imm` (64-bit).
    pub fn add_r_imm(&mut self, dst: Reg, imm: i32) {
        self.alu_r_imm(0, dst, imm);
    }

    /// `sub dst, imm` (64-bit).
    pub fn sub_r_imm(&mut self, dst: Reg, imm: i32) {
        self.alu_r_imm(5, dst, imm);
    }

    /// `and dst, imm` (64-bit, imm sign-extended).
    pub fn and_r_imm(&mut self, dst: Reg, imm: i32) {
        self.alu_r_imm(4, dst, imm);
    }

    fn alu_r_imm(&mut self, ext: u8, dst: Reg, imm: i32) {
        self.rex(true, 0, dst);
        if let Ok(i) = i8::try_from(imm) {
            self.byte(0x83);
            self.modrm_reg(ext, dst);
            self.byte(i as u8);
        } else {
            self.byte(0x81);
            self.modrm_reg(ext, dst);
            self.bytes(&imm.to_le_bytes());
        }
    }

    /// `cmp a, b` (64-bit): flags from `a - b`.
    pub fn cmp_r_r(&mut self, a: Reg, b: Reg) {
        self.rex(true, b as u8, a);
        self.byte(0x39);
        self.modrm_reg(b as u8, a);
    }

    /// `push r`.
    pub fn push(&mut self, r: Reg) {
        self.rex(false, 0, r);
        self.byte(0x50 + r.low());
    }

    /// `pop r`.
    pub fn pop(&mut self, r: Reg) {
        self.rex(false, 0, r);
        self.byte(0x58 + r.low());
    }

    /// `call rel32` to an absolute execution address within ±2 GiB.
    pub fn call_rel32(&mut self, target: u64) {
        let next = self.here() + 5;
        let rel = target.wrapping_sub(next) as i64;
        let rel = i32::try_from(rel).expect("call target out of rel32 reach");
        self.byte(0xe8);
        self.bytes(&rel.to_le_bytes());
    }

    /// `call rel32` to a target not known yet; returns where its rel32 field
    /// is written (host pointer) and the execution address it is relative
    /// to, for [`patch_rel32`].
    pub fn call_rel32_later(&mut self) -> (*mut u8, u64) {
        self.byte(0xe8);
        let field = self.buf[self.len..].as_mut_ptr();
        self.bytes(&[0; 4]);
        (field, self.here())
    }

    /// `call r`.
    pub fn call_r(&mut self, r: Reg) {
        self.rex(false, 0, r);
        self.byte(0xff);
        self.modrm_reg(2, r);
    }

    /// `jb rel8` (unsigned below), target bound later with [`Asm::bind`].
    pub fn jb_fwd(&mut self) -> Fixup {
        self.bytes(&[0x72, 0]);
        Fixup(self.len)
    }

    /// `jne rel8` (not equal), target bound later with [`Asm::bind`].
    pub fn jne_fwd(&mut self) -> Fixup {
        self.bytes(&[0x75, 0]);
        Fixup(self.len)
    }

    /// `jmp rel32`, target bound later with [`Asm::bind32`] (a jump over
    /// more code than a short one reaches).
    pub fn jmp_fwd32(&mut self) -> Fixup32 {
        self.bytes(&[0xe9, 0, 0, 0, 0]);
        Fixup32(self.len)
    }

    /// Points a [`Asm::jmp_fwd32`] at the current position.
    pub fn bind32(&mut self, f: Fixup32) {
        let rel = i32::try_from(self.len - f.0).expect("jump out of reach");
        self.buf[f.0 - 4..f.0].copy_from_slice(&rel.to_le_bytes());
    }

    /// Points a forward jump at the current position.
    pub fn bind(&mut self, f: Fixup) {
        let rel = u8::try_from(self.len - f.0).expect("short jump out of reach");
        assert!(rel <= 127, "short jump out of reach");
        self.buf[f.0 - 1] = rel;
    }

    /// `xsave64 [m]` (state-component bitmap in edx:eax).
    pub fn xsave64(&mut self, m: Mem) {
        self.rex(true, 0, m.base);
        self.bytes(&[0x0f, 0xae]);
        self.modrm_mem(4, m);
    }

    /// `xrstor64 [m]` (state-component bitmap in edx:eax).
    pub fn xrstor64(&mut self, m: Mem) {
        self.rex(true, 0, m.base);
        self.bytes(&[0x0f, 0xae]);
        self.modrm_mem(5, m);
    }

    /// `ret`.
    pub fn ret(&mut self) {
        self.byte(0xc3);
    }

    /// `rep movsq`: copies `rcx` words from `[rsi]` to `[rdi]`, upwards
    /// (the direction flag is clear in TCG's code: no host code it runs
    /// sets it, and the ABI has it clear across calls).
    pub fn rep_movsq(&mut self) {
        self.bytes(&[0xf3, 0x48, 0xa5]);
    }

    /// `nop` (one byte).
    pub fn nop1(&mut self) {
        self.byte(0x90);
    }

    /// `xchg ax, ax`: a two-byte nop that can later be overwritten, in one
    /// aligned 16-bit store, by a two-byte `jmp rel8` (see [`jmp8_bytes`]).
    pub fn nop2(&mut self) {
        self.bytes(&[0x66, 0x90]);
    }

    /// `mov word [rip + x], imm16`, storing to the execution address `target`.
    pub fn mov_rip_m16_imm16(&mut self, target: u64, imm: u16) {
        // 66 c7 05 disp32 imm16: disp is relative to the end of the insn.
        let next = self.here() + 9;
        let rel = i32::try_from(target.wrapping_sub(next) as i64)
            .expect("rip-relative target out of reach");
        self.bytes(&[0x66, 0xc7, 0x05]);
        self.bytes(&rel.to_le_bytes());
        self.bytes(&imm.to_le_bytes());
    }
}

/// Points a [`Asm::call_rel32_later`] call at `target`.
///
/// # Safety
/// `field` is the still writable rel32 field that call returned.
pub unsafe fn patch_rel32(field: *mut u8, next: u64, target: u64) {
    let rel =
        i32::try_from(target.wrapping_sub(next) as i64).expect("call target out of rel32 reach");
    // SAFETY: the caller's contract: `field` is 4 writable bytes.
    unsafe { std::ptr::copy_nonoverlapping(rel.to_le_bytes().as_ptr(), field, 4) };
}

/// The two bytes of `jmp rel8` from `from` (the jump's address) to `to`, as
/// the little-endian u16 a single store writes.
pub fn jmp8_bytes(from: u64, to: u64) -> u16 {
    let rel = to.wrapping_sub(from + 2) as i64;
    let rel = i8::try_from(rel).expect("short jump out of reach");
    u16::from_le_bytes([0xeb, rel as u8])
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions, Formatter, GasFormatter, Instruction};
    use Reg::*;

    /// Disassembles `code` placed at `rx` in AT&T syntax, one line per insn.
    pub(crate) fn dis(code: &[u8], rx: u64) -> Vec<String> {
        let mut d = Decoder::with_ip(64, code, rx, DecoderOptions::NONE);
        let mut f = GasFormatter::new();
        f.options_mut().set_uppercase_hex(false);
        f.options_mut().set_small_hex_numbers_in_decimal(false);
        let mut out = Vec::new();
        let mut ins = Instruction::default();
        while d.can_decode() {
            d.decode_out(&mut ins);
            assert!(!ins.is_invalid(), "invalid encoding in {code:02x?}");
            let mut s = String::new();
            f.format(&ins, &mut s);
            out.push(s);
        }
        out
    }

    fn one(f: impl FnOnce(&mut Asm)) -> String {
        let mut buf = [0u8; 64];
        let mut a = Asm::new(&mut buf, 0x1000);
        f(&mut a);
        let n = a.len();
        let v = dis(&buf[..n], 0x1000);
        assert_eq!(v.len(), 1, "{v:?}");
        v[0].clone()
    }

    #[test]
    fn stores_through_every_base() {
        // Every base register, including the ones needing SIB (rsp, r12) and
        // the ones without a mod=00 form (rbp, r13).
        for n in 0..16 {
            let r = Reg::from_num(n).unwrap();
            let name = format!("{r:?}").to_lowercase();
            assert_eq!(
                one(|a| a.mov_m64_imm32(mem(r, 0), 0x1234)),
                format!("movq $0x1234,(%{name})")
            );
            assert_eq!(
                one(|a| a.mov_m64_imm32(mem(r, 8), -1)),
                format!("movq $0xffffffffffffffff,0x8(%{name})")
            );
            assert_eq!(
                one(|a| a.mov_m32_imm32(mem(r, 0x200), 0x8000_0000)),
                format!("movl $0x80000000,0x200(%{name})")
            );
            assert_eq!(
                one(|a| a.mov_m64_r(mem(R14, 16), r)),
                format!("mov %{name},0x10(%r14)")
            );
            assert_eq!(
                one(|a| a.mov_m64_r(mem(r, -8), R9)),
                format!("mov %r9,-0x8(%{name})")
            );
            let name32 = match n {
                0..=7 => format!("e{}", &name[1..]),
                _ => format!("{name}d"),
            };
            assert_eq!(
                one(|a| a.mov_m32_r(mem(R14, 12), r)),
                format!("mov %{name32},0xc(%r14)")
            );
            assert_eq!(
                one(|a| a.mov_r_m64(r, mem(Rbp, -0x40))),
                format!("mov -0x40(%rbp),%{name}")
            );
            assert_eq!(
                one(|a| a.mov_r32_m32(r, mem(Rbp, 0x74))),
                format!("mov 0x74(%rbp),%{name32}")
            );
            assert_eq!(
                one(|a| a.cmp_r_m64(r, mem(R15, 0x3f8))),
                format!("cmp 0x3f8(%r15),%{name}")
            );
            assert_eq!(
                one(|a| a.cmp_r32_m32(r, mem(R15, 0x3f8))),
                format!("cmp 0x3f8(%r15),%{name32}")
            );
            assert_eq!(
                one(|a| a.cmp_r_m64(Rax, mem(r, -8))),
                format!("cmp -0x8(%{name}),%rax")
            );
            assert_eq!(
                one(|a| a.prefetchw(mem(r, 0x400))),
                format!("prefetchw 0x400(%{name})")
            );
            assert_eq!(
                one(|a| a.prefetchw(mem(r, 0))),
                format!("prefetchw (%{name})")
            );
            assert_eq!(
                one(|a| a.push_m64(mem(r, 0x1f8))),
                format!("pushq 0x1f8(%{name})")
            );
            assert_eq!(one(|a| a.push_m64(mem(r, 0))), format!("pushq (%{name})"));
            if r != Rsp {
                assert_eq!(
                    one(|a| a.pop_m64(mem(r, 0x24))),
                    format!("popq 0x24(%{name})")
                );
                assert_eq!(
                    one(|a| a.pop_m64(mem(r, -0x100))),
                    format!("popq -0x100(%{name})")
                );
            }
        }
    }

    #[test]
    fn register_forms() {
        assert_eq!(one(|a| a.add_r_imm(R14, 8)), "add $0x8,%r14");
        assert_eq!(one(|a| a.add_r_imm(R14, 4096)), "add $0x1000,%r14");
        assert_eq!(one(|a| a.sub_r_imm(Rsp, 0x400)), "sub $0x400,%rsp");
        assert_eq!(
            one(|a| a.and_r_imm(Rsp, -64)),
            "and $0xffffffffffffffc0,%rsp"
        );
        assert_eq!(one(|a| a.cmp_r_r(R14, R15)), "cmp %r15,%r14");
        assert_eq!(one(|a| a.mov_r_r(R14, Rax)), "mov %rax,%r14");
        assert_eq!(one(|a| a.mov_r_r(Rdi, R14)), "mov %r14,%rdi");
        assert_eq!(
            one(|a| a.mov_r_imm64(Rax, 0x1122_3344_5566_7788)),
            "movabs $0x1122334455667788,%rax"
        );
        assert_eq!(
            one(|a| a.mov_r32_imm32(Rdx, 0xffff_ffff)),
            "mov $0xffffffff,%edx"
        );
        assert_eq!(one(|a| a.lea(Rsp, mem(Rbp, -72))), "lea -0x48(%rbp),%rsp");
        assert_eq!(one(|a| a.push(R11)), "push %r11");
        assert_eq!(one(|a| a.pop(Rbp)), "pop %rbp");
        assert_eq!(one(|a| a.call_r(Rax)), "call *%rax");
        assert_eq!(one(|a| a.xsave64(mem(Rsp, 0))), "xsave64 (%rsp)");
        assert_eq!(one(|a| a.xrstor64(mem(Rsp, 0))), "xrstor64 (%rsp)");
        assert_eq!(one(|a| a.ret()), "ret");
        assert_eq!(one(|a| a.rep_movsq()), "rep movsq (%rsi),(%rdi)");
        assert_eq!(one(|a| a.nop1()), "nop");
        assert_eq!(one(|a| a.nop2()), "xchg %ax,%ax");
        // iced shows the resolved rip-relative target.
        assert_eq!(
            one(|a| a.mov_rip_m16_imm16(0x2000, 0x10eb)),
            "movw $0x10eb,0x2000"
        );
    }

    #[test]
    fn self_patching_jump() {
        // A nop2 at 0x1000 overwritten with jmp8_bytes(0x1000, 0x1010)
        // decodes as a jump to 0x1010.
        let j = jmp8_bytes(0x1000, 0x1010);
        assert_eq!(dis(&j.to_le_bytes(), 0x1000), ["jmp 0x0000000000001010"]);
    }

    #[test]
    fn forward_jumps_short_and_long() {
        let mut buf = [0u8; 512];
        let mut a = Asm::new(&mut buf, 0x10_0000);
        let near = a.jne_fwd();
        let far = a.jmp_fwd32();
        a.bind(near);
        for _ in 0..200 {
            a.nop1();
        }
        a.bind32(far);
        a.ret();
        let n = a.len();
        let v = dis(&buf[..n], 0x10_0000);
        assert_eq!(v[0], "jne 0x0000000000100007");
        assert_eq!(v[1], "jmp 0x00000000001000cf");
        assert_eq!(v.last().unwrap(), "ret");
        assert_eq!(v.len(), 203);
    }

    #[test]
    fn relative_branches() {
        let mut buf = [0u8; 64];
        let mut a = Asm::new(&mut buf, 0x10_0000);
        let skip = a.jb_fwd();
        a.call_rel32(0x0f_0000);
        a.bind(skip);
        a.ret();
        let n = a.len();
        assert_eq!(
            dis(&buf[..n], 0x10_0000),
            ["jb 0x0000000000100007", "call 0x00000000000f0000", "ret"]
        );
    }
}
