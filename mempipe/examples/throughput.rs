//! Rough throughput check of the ring within one process (producer thread plus
//! consumer threads), e.g.
//!
//! ```text
//! cargo run --release -p mempipe --example throughput -- [chunk_kib] [chunk_count] [consumers] [touch 0|1] [seconds]
//! ```
//!
//! With `touch = 1` the producer writes every byte of each chunk and the
//! consumers read every byte; with `touch = 0` only the transport is measured.

use std::time::{Duration, Instant};

use mempipe::{Consumer, Producer};

fn arg(n: usize, default: u64) -> u64 {
    std::env::args()
        .nth(n)
        .map(|a| a.parse().expect("numeric argument"))
        .unwrap_or(default)
}

fn main() {
    let chunk_size = arg(1, 128) as usize * 1024;
    let chunk_count = arg(2, 16) as usize;
    let consumers = arg(3, 2) as usize;
    let touch = arg(4, 1) != 0;
    let seconds = arg(5, 2);

    let mut p = Producer::create_memfd(chunk_size, chunk_count).unwrap();
    let c = Consumer::from_fd(p.fd().unwrap().try_clone_to_owned().unwrap()).unwrap();
    p.release_fd();
    let t0 = Instant::now();
    let (chunks, sum) = std::thread::scope(|s| {
        let prod = s.spawn(move || {
            let end = Instant::now() + Duration::from_secs(seconds);
            let mut n = 0u64;
            while n & 255 != 0 || Instant::now() < end {
                let ptr = p.acquire().unwrap();
                if touch {
                    // SAFETY: acquire returned chunk_size writable, 8-aligned bytes.
                    let words =
                        unsafe { std::slice::from_raw_parts_mut(ptr as *mut u64, chunk_size / 8) };
                    for (i, w) in words.iter_mut().enumerate() {
                        *w = n ^ i as u64;
                    }
                }
                p.publish(chunk_size).unwrap();
                n += 1;
            }
            p.close();
            n
        });
        let readers: Vec<_> = (0..consumers)
            .map(|_| {
                s.spawn(|| {
                    let mut sum = 0u64;
                    let mut buf = mempipe::ChunkBuf::new();
                    while let Some(ch) = c.recv() {
                        if touch {
                            ch.copy_into(&mut buf);
                            for w in buf.bytes().chunks_exact(8) {
                                sum = sum.wrapping_add(u64::from_ne_bytes(w.try_into().unwrap()));
                            }
                        } else {
                            sum = sum.wrapping_add(ch.seq());
                        }
                    }
                    sum
                })
            })
            .collect();
        let chunks = prod.join().unwrap();
        let sum = readers
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold(0u64, u64::wrapping_add);
        (chunks, sum)
    });
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "chunk {} KiB x {chunk_count}, {consumers} consumer thread(s), touch={touch}: \
         {chunks} chunks in {secs:.2} s = {:.0} chunks/s, {:.2} GB/s (checksum {sum:x})",
        chunk_size / 1024,
        chunks as f64 / secs,
        chunks as f64 * chunk_size as f64 / secs / 1e9,
    );
}
