// SPDX-License-Identifier: GPL-2.0-or-later
//! viz is a value, not module statics: one process draws the same
//! recording several times, one after another and two at once, and every
//! picture (and its layout) is byte for byte the one `cannoli viz` draws
//! in a process of its own. A run that left anything behind for the next
//! (a survey's streams, a grid, the time axis) would draw another picture.
//!
//! The recording is `tests/programs/vizpattern.c` on mipsel, recorded with
//! `cannoli record --hooks mem` (see `e2e/tests/viz.rs`).

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use e2e::recording::Tool;
use e2e::{guest, RunDir};

const LIMIT: Duration = Duration::from_secs(180);

/// Draws `rec` in this process as `<tag>.ppm` and `<tag>.json`; returns
/// their bytes.
fn draw(dir: &RunDir, rec: &std::path::Path, tag: &str) -> (Vec<u8>, Vec<u8>) {
    let (ppm, json) = (
        dir.file(&format!("{tag}.ppm")),
        dir.file(&format!("{tag}.json")),
    );
    let code = viz::main(viz::Args {
        recording: rec.to_path_buf(),
        output: ppm.clone(),
        width: 800,
        height: 500,
        layout_json: Some(json.clone()),
        threads: 2,
    });
    assert_eq!(code, 0, "{tag}: exit status");
    (read(ppm), read(json))
}

fn read(p: PathBuf) -> Vec<u8> {
    fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn draws_the_same_picture_every_time_in_one_process() {
    let dir = RunDir::new();
    let prog = guest("mipsel", "vizpattern");
    let rec = dir.file("run.cnl");
    Tool::new("cannoli")
        .args(["record", "--hooks", "mem", "-o"])
        .arg(&rec)
        .arg(&prog)
        .run(&dir, "record", LIMIT)
        .unwrap()
        .expect_code(0)
        .unwrap();

    // The reference: the command, alone in its process.
    Tool::new("cannoli")
        .arg("viz")
        .arg(&rec)
        .args(["-o", "cli.ppm", "--width", "800", "--height", "500"])
        .args(["--layout-json", "cli.json", "--threads", "2"])
        .run(&dir, "viz", LIMIT)
        .unwrap()
        .expect_code(0)
        .unwrap();
    let want = (read(dir.file("cli.ppm")), read(dir.file("cli.json")));
    assert!(want.0.len() > 800 * 500 * 3, "a whole picture");

    // Twice in a row here, then twice at once.
    for tag in ["first", "second"] {
        let got = draw(&dir, &rec, tag);
        assert!(
            got.0 == want.0,
            "{tag}: the pixels differ from cannoli viz's"
        );
        assert_eq!(
            String::from_utf8_lossy(&got.1),
            String::from_utf8_lossy(&want.1),
            "{tag}: the layout"
        );
    }
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| draw(&dir, &rec, "left"));
        let b = s.spawn(|| draw(&dir, &rec, "right"));
        (a.join().unwrap(), b.join().unwrap())
    });
    for (tag, got) in [("left", a), ("right", b)] {
        assert!(
            got.0 == want.0,
            "{tag}: the pixels differ from cannoli viz's"
        );
        assert_eq!(got.1, want.1, "{tag}: the layout");
    }
}
