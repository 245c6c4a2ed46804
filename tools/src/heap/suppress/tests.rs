// SPDX-License-Identifier: GPL-2.0-or-later
use std::path::Path;
use std::sync::Arc;

use super::super::blocks::{Bad, Kind};
use super::super::report::{Finding, Op};
use super::*;

fn finding(kind: Kind, op: Op, size: u64, stack: &[&str]) -> Finding {
    Finding {
        bad: Bad {
            kind,
            addr: 0x1000,
            block: None,
        },
        op,
        pc: 0x400000,
        size,
        pid: 1,
        tid: 1,
        stack: stack.iter().map(|s| Arc::<str>::from(*s)).collect(),
    }
}

fn set(text: &str) -> Suppressions {
    Suppressions {
        list: parse(text, "t.supp").unwrap(),
        program: "prog".into(),
    }
}

/// What `valgrind --gen-suppressions=all` wrote for the planted leak of
/// `dyn_heapbugs` (x86_64).
const MEMCHECK_LEAK: &str = "{
   <insert_a_suppression_name_here>
   Memcheck:Leak
   match-leak-kinds: definite
   fun:malloc
   fun:hb_leak
   fun:main
}
";

const LEAK_STACK: &[&str] = &[
    "malloc+0x0",
    "hb_leak+0x1f",
    "main+0xd0",
    "libc.so.6+0x2724a",
    "__libc_start_main+0x85",
    "_start+0x21",
];

#[test]
fn memchecks_own_leak_suppression_matches() {
    let s = set(MEMCHECK_LEAK);
    let leak = finding(Kind::Leak, Op::Exit, 33, LEAK_STACK);
    assert_eq!(s.matching(&leak).map(|s| s.at.as_str()), Some("t.supp:1"));
    // Another function's leak, or another kind, is not suppressed.
    let other = finding(
        Kind::Leak,
        Op::Exit,
        33,
        &["malloc+0x0", "hb_other+0x1f", "main+0x10"],
    );
    assert!(s.matching(&other).is_none());
    let free = finding(Kind::DoubleFree, Op::Free, 0, LEAK_STACK);
    assert!(s.matching(&free).is_none());
    // A stack shorter than the lines is not matched.
    let short = finding(Kind::Leak, Op::Exit, 33, &["malloc+0x0", "hb_leak+0x1f"]);
    assert!(s.matching(&short).is_none());
}

#[test]
fn leak_kinds_without_definite_do_not_match() {
    let s = set(&MEMCHECK_LEAK.replace("definite", "reachable,possible"));
    assert!(s
        .matching(&finding(Kind::Leak, Op::Exit, 33, LEAK_STACK))
        .is_none());
    let s = set(&MEMCHECK_LEAK.replace("definite", "all"));
    assert!(s
        .matching(&finding(Kind::Leak, Op::Exit, 33, LEAK_STACK))
        .is_some());
    let s = set(&MEMCHECK_LEAK.replace("   match-leak-kinds: definite\n", ""));
    assert!(s
        .matching(&finding(Kind::Leak, Op::Exit, 33, LEAK_STACK))
        .is_some());
}

#[test]
fn addr_kinds_match_the_access_size() {
    let text = "{\n x\n Memcheck:Addr4\n fun:f\n}\n";
    let s = set(text);
    let stack = &["f+0x10", "main+0x4"];
    assert!(s
        .matching(&finding(Kind::UseAfterFree, Op::Read, 4, stack))
        .is_some());
    assert!(s
        .matching(&finding(Kind::Overflow, Op::Write, 4, stack))
        .is_some());
    assert!(s
        .matching(&finding(Kind::Overflow, Op::Write, 8, stack))
        .is_none());
    assert!(s
        .matching(&finding(Kind::Leak, Op::Exit, 4, stack))
        .is_none());
}

#[test]
fn free_matches_glibcs_own_name_by_memchecks() {
    let s = set("{\n x\n Memcheck:Free\n fun:free\n fun:hb_double_free\n}\n");
    let stack = &["cfree+0x0", "hb_double_free+0x2e", "main+0xd0"];
    assert!(s
        .matching(&finding(Kind::DoubleFree, Op::Free, 0, stack))
        .is_some());
    assert!(s
        .matching(&finding(Kind::InvalidFree, Op::Free, 0, stack))
        .is_some());
    let mips = &["__free+0x0", "hb_double_free+0x2e", "main+0xd0"];
    assert!(s
        .matching(&finding(Kind::DoubleFree, Op::Free, 0, mips))
        .is_some());
    let other = &["cfree+0x0", "hb_free_interior+0x2e", "main+0xd0"];
    assert!(s
        .matching(&finding(Kind::InvalidFree, Op::Free, 0, other))
        .is_none());
}

#[test]
fn dots_globs_and_objects() {
    let s = set("{\n x\n Memcheck:Leak\n fun:m*c\n ...\n obj:/usr/lib/*/libc.so.?\n}\n");
    let leak = finding(Kind::Leak, Op::Exit, 33, LEAK_STACK);
    assert!(s.matching(&leak).is_some());
    // `...` may match no frame at all.
    let s = set("{\n x\n Memcheck:Leak\n ...\n fun:malloc\n fun:hb_leak\n}\n");
    assert!(s.matching(&leak).is_some());
    // obj: does not match a named frame, fun: not an unnamed one.
    let s = set("{\n x\n Memcheck:Leak\n obj:*malloc*\n}\n");
    assert!(s.matching(&leak).is_none());
    let s = set("{\n x\n Memcheck:Leak\n ...\n fun:libc.so.6\n}\n");
    assert!(s.matching(&leak).is_none());
    // A frame of the program's own sections is the program's.
    let s = set("{\n x\n Memcheck:Leak\n fun:malloc\n obj:*/prog\n}\n");
    let stripped = finding(Kind::Leak, Op::Exit, 8, &["malloc+0x0", ".text+0x1234"]);
    assert!(s.matching(&stripped).is_some());
    // And so is one of a program without section headers.
    let headless = finding(Kind::Leak, Op::Exit, 8, &["malloc+0x0", "prog+0x1234"]);
    assert!(s.matching(&headless).is_some());
    assert_eq!(
        generate(&headless, Path::new("/x/prog")),
        "{\n   <insert_a_suppression_name_here>\n   Memcheck:Leak\n   match-leak-kinds: definite\n   fun:malloc\n   obj:*/prog\n}\n"
    );
}

#[test]
fn mangled_names_match_demangled_frames() {
    let s = set("{\n x\n Memcheck:Leak\n fun:_Znwm\n fun:main\n}\n");
    let leak = finding(
        Kind::Leak,
        Op::Exit,
        4,
        &["operator new(unsigned long)+0x0", "main+0x10"],
    );
    assert!(s.matching(&leak).is_some());
}

#[test]
fn other_tools_and_kinds_never_match() {
    let s = set(
        "# a comment\n{\n a\n Helgrind:Race\n fun:*\n}\n{\n b\n Memcheck:Param\n write(buf)\n fun:*\n}\n{\n c\n Memcheck:Cond\n fun:*\n}\n",
    );
    assert_eq!(s.list.len(), 3);
    for kind in Kind::ALL {
        assert!(s
            .matching(&finding(kind, Op::Read, 4, LEAK_STACK))
            .is_none());
    }
}

#[test]
fn a_broken_file_is_one_line_naming_its_line() {
    for (text, line, why) in [
        ("{\n x\n Memcheck:Leak\n fun:f\n", ":1:", "no closing"),
        ("x\n", ":1:", "expected '{'"),
        ("{\n x\n Memcheck:Leak\n}\n", ":1:", "no frame lines"),
        ("{\n x\n Memcheck:Addr3\n fun:f\n}\n", ":3:", "unknown kind"),
        (
            "{\n x\n Memcheck:Lek\n fun:f\n}\n",
            ":3:",
            "unknown memcheck kind",
        ),
        ("{\n x\n Leak\n fun:f\n}\n", ":3:", "TOOL:KIND"),
        ("{\n x\n Memcheck:Leak\n fn:f\n}\n", ":4:", "not a frame"),
        (
            "{\n x\n Memcheck:Leak\n match-leak-kinds: defnite\n fun:f\n}\n",
            ":4:",
            "leak kind",
        ),
        ("{\n x\n Memcheck:Leak\n fun:f\n{\n}\n", ":5:", "inside"),
    ] {
        let e = parse(text, "t.supp").unwrap_err();
        assert!(e.contains(line) && e.contains(why), "{text:?}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

#[test]
fn globs() {
    for (p, t, want) in [
        ("*", "", true),
        ("a*", "abc", true),
        ("*c", "abc", true),
        ("a?c", "abc", true),
        ("a?c", "ac", false),
        ("*b*", "abc", true),
        ("*x*", "abc", false),
        ("a*b*c", "aXbYbZc", true),
        ("abc", "abcd", false),
    ] {
        assert_eq!(glob(p, t), want, "{p} {t}");
    }
}

#[test]
fn a_generated_suppression_matches_its_finding() {
    let leak = finding(Kind::Leak, Op::Exit, 33, LEAK_STACK);
    let text = generate(&leak, Path::new("/x/prog"));
    assert_eq!(text, MEMCHECK_LEAK);
    // The C library's own name is written as memcheck names it.
    let mut stack = LEAK_STACK.to_vec();
    stack[0] = "__libc_malloc+0x0";
    let text = generate(
        &finding(Kind::Leak, Op::Exit, 33, &stack),
        Path::new("/x/prog"),
    );
    assert_eq!(text, MEMCHECK_LEAK);
    let uaf = finding(
        Kind::UseAfterFree,
        Op::Read,
        1,
        &[
            "0x4000",
            ".text+0x10",
            "libc.so.6+0x20",
            "hb+0x3",
            "main+0x1",
            "_start+0x2",
        ],
    );
    let text = generate(&uaf, Path::new("/x/prog"));
    assert_eq!(
        text,
        "{\n   <insert_a_suppression_name_here>\n   Memcheck:Addr1\n   ...\n   obj:*/prog\n   obj:*/libc.so.6\n   fun:hb\n   fun:main\n}\n"
    );
    let s = Suppressions {
        list: parse(&text, "gen").unwrap(),
        program: "prog".into(),
    };
    assert!(s.matching(&uaf).is_some());
    assert!(s
        .matching(&finding(Kind::UseAfterFree, Op::Read, 2, uaf_stack()))
        .is_none());
}

fn uaf_stack() -> &'static [&'static str] {
    &[
        "0x4000",
        ".text+0x10",
        "libc.so.6+0x20",
        "hb+0x3",
        "main+0x1",
    ]
}

#[test]
fn many_dots_take_no_time() {
    // 60 `...` between frames that never match: a backtracking matcher
    // would try the stack's splits in every combination.
    let mut text = String::from("{\n x\n Memcheck:Leak\n");
    for _ in 0..60 {
        text.push_str(" ...\n fun:m*\n");
    }
    text.push_str(" fun:nowhere\n}\n");
    let s = set(&text);
    let stack: Vec<String> = (0..200).map(|i| format!("m{i}+0x0")).collect();
    let stack: Vec<&str> = stack.iter().map(String::as_str).collect();
    assert!(s
        .matching(&finding(Kind::Leak, Op::Exit, 1, &stack))
        .is_none());
    let mut text = text.replace(" fun:nowhere\n", "");
    assert!(set(&text)
        .matching(&finding(Kind::Leak, Op::Exit, 1, &stack))
        .is_some());
    text = text.replace(" ...\n fun:m*\n", " fun:m*\n");
    assert!(set(&text)
        .matching(&finding(Kind::Leak, Op::Exit, 1, &stack))
        .is_some());
    assert!(set(&text)
        .matching(&finding(Kind::Leak, Op::Exit, 1, &stack[..59]))
        .is_none());
}

/// What memcheck wrote for a leak of the host's stripped `tr`: its own
/// code by file, and the C library's caller of `main` as `(below main)`.
#[test]
fn below_main_and_a_stripped_programs_frames() {
    let s = set("{
   <insert_a_suppression_name_here>
   Memcheck:Leak
   match-leak-kinds: definite
   fun:malloc
   obj:/usr/bin/tr
   obj:/usr/bin/tr
   fun:(below main)
}
");
    let s = Suppressions {
        program: "tr".into(),
        ..s
    };
    let stack = &[
        "malloc+0x0",
        ".text+0x5839",
        ".text+0x4bb",
        "__libc_start_call_main+0x7a",
        "__libc_start_main_impl+0x85",
        ".text+0x1041",
    ];
    let leak = finding(Kind::Leak, Op::Exit, 32, stack);
    assert!(s.matching(&leak).is_some());
    let mut other = stack.to_vec();
    other[3] = "libc.so.6+0x2724a";
    assert!(s
        .matching(&finding(Kind::Leak, Op::Exit, 32, &other))
        .is_none());
    let text = generate(&leak, Path::new("/usr/bin/tr"));
    assert_eq!(
        text,
        "{\n   <insert_a_suppression_name_here>\n   Memcheck:Leak\n   match-leak-kinds: definite\n   fun:malloc\n   obj:*/tr\n   obj:*/tr\n   fun:(below main)\n}\n"
    );
}
