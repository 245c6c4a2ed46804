// SPDX-License-Identifier: GPL-2.0-or-later
//! `flake.nix` cannot be built here (Nix cannot fetch), so check what can be
//! checked offline: it parses, and its outputs evaluate against a stub
//! nixpkgs (`tests/fixtures/flake-mock.nix`) to a QEMU configured like
//! `scripts/build-qemu.sh` configures it. `nix-instantiate` comes from
//! Debian's nix-bin (scripts/deps.sh installs it), so a missing one is a
//! failure, not a skip.

use std::process::{Command, Output};

use e2e::workspace_root;

/// One `nix-instantiate` at a time: on a machine that has never run Nix the
/// first call creates Nix's SQLite database, and two first calls racing to
/// create it fail with "database is busy".
static NIX: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn nix_instantiate(args: &[&str]) -> Output {
    let _one_at_a_time = NIX.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new("nix-instantiate")
        .args(args)
        .current_dir(workspace_root())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run nix-instantiate ({e}); install it with `bash scripts/deps.sh` \
                 (Debian package nix-bin)"
            )
        });
    assert!(
        out.status.success(),
        "nix-instantiate {} failed ({}):\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn flake_nix_parses() {
    let flake = workspace_root().join("flake.nix");
    assert!(flake.is_file(), "{} is missing", flake.display());
    let out = nix_instantiate(&["--parse", "flake.nix"]);
    let parsed = String::from_utf8_lossy(&out.stdout);
    for attr in [
        "inputs",
        "outputs",
        "qemu-cannoli",
        "buildRustPackage",
        "devShells",
    ] {
        assert!(parsed.contains(attr), "the parsed flake has no {attr}");
    }
}

/// The value of a Nix string printed by `nix-instantiate --eval`.
fn unquote(s: &str) -> String {
    let s = s.trim();
    let s = s
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(s);
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(o) => out.push(o),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `conf_common=(...)` of scripts/build-qemu.sh: its configure flags.
fn build_qemu_flags() -> (Vec<String>, String) {
    let script = std::fs::read_to_string(workspace_root().join("scripts/build-qemu.sh")).unwrap();
    let start = script
        .find("conf_common=(")
        .expect("conf_common in build-qemu.sh");
    let body = &script[start + "conf_common=(".len()..];
    let body = &body[..body.find(')').unwrap()];
    let flags = body
        .split_whitespace()
        .filter(|f| f.starts_with("--"))
        .map(str::to_string)
        .collect();
    let targets = script
        .split("CANNOLI_QEMU_TARGETS:-")
        .nth(1)
        .and_then(|s| s.split('}').next())
        .expect("default CANNOLI_QEMU_TARGETS in build-qemu.sh")
        .to_string();
    (flags, targets)
}

/// `plugins=(...)` of scripts/build-qemu.sh: QEMU's plugins it builds.
fn build_qemu_plugins() -> Vec<String> {
    let script = std::fs::read_to_string(workspace_root().join("scripts/build-qemu.sh")).unwrap();
    let start = script
        .find("plugins=(")
        .expect("plugins=( in build-qemu.sh");
    let body = &script[start + "plugins=(".len()..];
    body[..body.find(')').unwrap()]
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn flake_outputs_evaluate_like_build_qemu_sh() {
    let out = nix_instantiate(&[
        "--readonly-mode",
        "--eval",
        "--strict",
        "e2e/tests/fixtures/flake-mock.nix",
        "--arg",
        "flake",
        "./flake.nix",
    ]);
    let text = unquote(&String::from_utf8_lossy(&out.stdout));
    let get = |key: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in the evaluated flake:\n{text}"))
            .to_string()
    };
    let configure = get("qemu-configure");
    let plain = get("plain-configure");
    let (flags, targets) = build_qemu_flags();
    for flag in &flags {
        if flag.starts_with("--target-list=") || flag.starts_with("--python=") {
            continue;
        }
        assert!(
            configure.contains(flag.as_str()),
            "flake.nix configures QEMU without {flag}: {configure}"
        );
        assert!(
            plain.contains(flag.as_str()),
            "flake.nix's plain QEMU lacks {flag}: {plain}"
        );
    }
    assert!(
        configure.contains(&format!("--target-list={targets} ")),
        "{configure}"
    );
    assert!(
        configure.contains("--with-cannoli=/nix/store/"),
        "{configure}"
    );
    assert!(
        !plain.contains("--with-cannoli"),
        "the plain QEMU is configured with cannoli: {plain}"
    );
    let version = std::fs::read_to_string(workspace_root().join("target/qemu.env"))
        .ok()
        .and_then(|e| {
            e.lines()
                .find_map(|l| l.strip_prefix("CANNOLI_QEMU_VERSION=").map(str::to_string))
        });
    if let Some(v) = version {
        assert_eq!(
            get("qemu-version"),
            v,
            "flake.nix builds another QEMU than scripts/build-qemu.sh"
        );
    }
    let build = get("qemu-build");
    for target in targets.split(',') {
        let bin = format!(" qemu-{} ", target.trim_end_matches("-linux-user"));
        assert!(
            build.contains(&bin),
            "flake.nix does not build{bin}: {build}"
        );
    }
    for plugin in build_qemu_plugins() {
        assert!(
            build.contains(&plugin),
            "flake.nix does not build {plugin}: {build}"
        );
    }
    assert!(get("patches").ends_with("/qemu_patches.patch"));
    assert!(get("cargo-lock").ends_with("/Cargo.lock"));
    assert_eq!(get("cannoli-version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(get("default"), "cannoli");
    assert!(get("shell-qemu-build").ends_with("-qemu-cannoli"));
    let cross = get("shell-cross");
    for cc in ["mipsel-linux-gnu-gcc", "riscv64-linux-gnu-gcc", "cargo"] {
        assert!(
            cross.split(' ').any(|p| p == cc),
            "the dev shell has no {cc}: {cross}"
        );
    }
}
