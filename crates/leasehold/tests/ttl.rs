//! After a random workload on every kind (waits, cancels, extends,
//! hold-at-least, force-release, permit changes), every key leasehold
//! wrote has a TTL.

mod common;

use std::time::Duration;

use common::{client_with, cmd, poll_then_drop};
use leasehold_testkit::RedisServer;

fn rnd(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

async fn keys_without_ttl(server: &RedisServer) -> Vec<String> {
    let keys: Vec<String> = cmd(server, &["KEYS", "*"]).await;
    let mut bad = Vec::new();
    for k in keys {
        let pttl: i64 = cmd(server, &["PTTL", &k]).await;
        if pttl == -1 {
            bad.push(k);
        }
    }
    bad
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_has_a_ttl_after_a_random_workload() {
    let server = RedisServer::start();
    let mut tasks = Vec::new();
    for t in 0..12u64 {
        let c = client_with(&server, Duration::from_millis(400), t % 2 == 0);
        tasks.push(tokio::spawn(async move {
            let mut seed = 0x9e37_79b9_7f4a_7c15 ^ ((t + 1) * 0x1234_5678);
            for _ in 0..40 {
                let name = ["a", "b", "c"][(rnd(&mut seed) % 3) as usize];
                let op = rnd(&mut seed) % 12;
                let hold = Duration::from_millis(rnd(&mut seed) % 300 + 10);
                let wait = Duration::from_millis(rnd(&mut seed) % 300);
                match op {
                    0 | 1 => {
                        let re = c
                            .reentrant_mutex(&format!("re-{name}"))
                            .unwrap()
                            .with_hold_at_least(hold)
                            .unwrap();
                        if let Ok(g) = re.acquire_timeout(wait).await {
                            let g2 = re.try_acquire().await.ok().flatten();
                            if rnd(&mut seed).is_multiple_of(2) {
                                let _ = g.extend(Duration::from_millis(50)).await;
                            }
                            drop(g2);
                            let _ = g.release().await;
                        }
                    }
                    2 | 3 => {
                        let rw = c
                            .rw_lock(&format!("rw-{name}"))
                            .unwrap()
                            .with_hold_at_least(hold)
                            .unwrap();
                        if rnd(&mut seed).is_multiple_of(2) {
                            let w = rw.write();
                            if let Ok(g) = w.acquire_timeout(wait).await {
                                let r = rw.read().try_acquire().await.ok().flatten();
                                let _ = g.release().await;
                                drop(r);
                            }
                        } else if let Ok(g) = rw.read().acquire_timeout(wait).await {
                            if rnd(&mut seed).is_multiple_of(2) {
                                let _ = g.extend(Duration::from_millis(30)).await;
                            }
                            let _ = g.release().await;
                        }
                    }
                    4 | 5 => {
                        let s = c.semaphore(&format!("s-{name}"), 3).unwrap();
                        let n = (rnd(&mut seed) % 3 + 1) as u32;
                        if let Ok(g) = s.acquire_many_timeout(n, wait).await {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            let _ = g.release().await;
                        }
                    }
                    6 => {
                        let re = c.reentrant_mutex(&format!("re-{name}")).unwrap();
                        let _ = poll_then_drop(re.acquire(), (rnd(&mut seed) % 30) as usize).await;
                    }
                    7 => {
                        let rw = c.rw_lock(&format!("rw-{name}")).unwrap();
                        let _ =
                            poll_then_drop(rw.write().acquire(), (rnd(&mut seed) % 30) as usize)
                                .await;
                    }
                    8 => {
                        let s = c.semaphore(&format!("s-{name}"), 3).unwrap();
                        let _ =
                            poll_then_drop(s.acquire_many(2), (rnd(&mut seed) % 30) as usize).await;
                    }
                    9 => {
                        let _ = c
                            .rw_lock(&format!("rw-{name}"))
                            .unwrap()
                            .force_release()
                            .await;
                        let _ = c
                            .reentrant_mutex(&format!("re-{name}"))
                            .unwrap()
                            .force_release()
                            .await;
                    }
                    10 => {
                        let m = c.mutex(&format!("m-{name}")).unwrap();
                        if let Ok(g) = m.acquire_timeout(wait).await {
                            let _ = g.release().await;
                        }
                    }
                    _ => {
                        let f = c.fair_mutex(&format!("m-{name}")).unwrap();
                        let _ = poll_then_drop(f.acquire(), (rnd(&mut seed) % 30) as usize).await;
                    }
                }
            }
            c.flush().await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let bad = keys_without_ttl(&server).await;
    let mut detail = Vec::new();
    for k in &bad {
        let ty: String = cmd(&server, &["TYPE", k]).await;
        detail.push(format!("{k} ({ty})"));
    }
    assert!(bad.is_empty(), "keys without a TTL: {detail:?}");
    // And nothing is held by nobody for long: every lease here is short.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let left: Vec<String> = cmd(&server, &["KEYS", "*"]).await;
    // A guard's release is remembered for six command timeouts (2 s by
    // default): a record, not a lock, that runs out by itself.
    for record in left.iter().filter(|k| k.contains("}:r:")) {
        let ttl: i64 = cmd(&server, &["PTTL", record]).await;
        assert!((0..=12_000).contains(&ttl), "{record}: {ttl}");
    }
    let locks: Vec<&String> = left
        .iter()
        .filter(|k| !k.ends_with(":fence") && !k.contains("{s-") && !k.contains("}:r:"))
        .collect();
    assert!(
        locks.is_empty(),
        "left after every lease ran out: {locks:?}"
    );
}
