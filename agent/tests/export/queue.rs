//! Sections 8-9: the queue under load, and graceful shutdown.

use crate::env::*;

#[test]
fn a_full_queue_drops_records_by_message_count_and_never_delays_responses() {
    let env = Env::new();
    let gate = Gate::new(&env.free);
    let mut agent = env.start(&["--export-free-space-file", env.free.to_str().unwrap()]);
    let client = plain_client();
    let n = QUEUE_MESSAGES + 76;
    let uids: Vec<String> = (0..n).map(|i| format!("q-{i:05}")).collect();
    let mut slowest = Duration::ZERO;
    for uid in &uids {
        let started = Instant::now();
        send_denied(&client, &agent, &violation(uid, "prod"));
        slowest = slowest.max(started.elapsed());
    }
    // The publisher is stuck on the first record; nothing has left the queue.
    wait_publisher_blocked(&agent);
    assert!(
        slowest < Duration::from_secs(2),
        "a response took {slowest:?}"
    );
    let c = counts(&agent);
    assert_eq!(c.queue_messages, QUEUE_MESSAGES as u64, "{c:?}");
    assert_eq!(c.dropped("queue_full"), 76, "{c:?}");
    assert_eq!((c.published, c.dropped_total()), (0, 76), "{c:?}");
    let status = agent.status();
    assert_eq!(status["export"]["queue"]["messages"], QUEUE_MESSAGES);
    assert_eq!(status["export"]["queue"]["bytes"], c.queue_bytes);

    gate.open(|| counts(&agent).queue_messages == 0);
    let c = wait_published(&agent, QUEUE_MESSAGES as u64);
    assert_eq!(
        (c.published, c.dropped_total()),
        (QUEUE_MESSAGES as u64, 76)
    );
    assert_eq!(c.queue_bytes, 0);
    stop(&mut agent);
    // The first 1,024 were queued, the rest refused.
    assert_eq!(
        ids(&all_records(&env.channel)),
        uids[..QUEUE_MESSAGES].to_vec()
    );
}

#[test]
fn a_full_queue_drops_records_by_bytes() {
    let env = Env::new();
    let gate = Gate::new(&env.free);
    let mut agent = env.start(&["--export-free-space-file", env.free.to_str().unwrap()]);
    let client = plain_client();
    // ~60 KiB records, all of one size: 16 MiB holds 270-odd of them.
    let n = 320;
    let uids: Vec<String> = (0..n).map(|i| format!("qb-{i:04}")).collect();
    for uid in &uids {
        send_denied(&client, &agent, &big_violation(uid, 60_000));
    }
    wait_publisher_blocked(&agent);
    let c = counts(&agent);
    let queued = c.queue_messages;
    assert!(queued > 0 && queued < n as u64, "{c:?}");
    assert_eq!(c.queue_bytes % queued, 0, "records of one size: {c:?}");
    let size = c.queue_bytes / queued;
    assert!(size > 60_000 && size <= RECORD_LIMIT as u64, "{size}");
    assert_eq!(
        queued,
        QUEUE_BYTES / size,
        "as many as fit in 16 MiB: {c:?}"
    );
    assert_eq!(c.dropped("queue_full"), n as u64 - queued, "{c:?}");
    assert_eq!(c.dropped_total(), n as u64 - queued, "{c:?}");

    gate.open(|| counts(&agent).queue_messages == 0);
    let c = wait_published(&agent, queued);
    assert_eq!(c.published, queued);
    stop(&mut agent);
    assert_eq!(
        ids(&all_records(&env.channel)),
        uids[..queued as usize].to_vec()
    );
}

#[test]
fn a_burst_of_concurrent_clients_loses_nothing_silently() {
    let env = Env::new();
    let mut agent = env.start(&[]);
    let threads = 16;
    let per_thread = 100;
    let started = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let agent = &agent;
            scope.spawn(move || {
                let client = plain_client();
                for i in 0..per_thread {
                    // ~6 KiB records: ~10 MiB in all, within the spool's 20 MiB.
                    send_denied(
                        &client,
                        agent,
                        &big_violation(&format!("burst-{t:02}-{i:04}"), 6000),
                    );
                }
            });
        }
    });
    let elapsed = started.elapsed();
    let total = (threads * per_thread) as u64;
    let c = wait_counts(&agent, "every record accounted for", |c| {
        c.queue_messages == 0 && c.published + c.dropped_total() == total
    });
    eprintln!(
        "burst: {total} violations in {elapsed:?}; published {}, dropped {:?}",
        c.published, c.dropped
    );
    stop(&mut agent);
    let records = all_records(&env.channel);
    assert_eq!(records.len() as u64, c.published, "on disk = published");
    let unique: BTreeSet<String> = ids(&records).into_iter().collect();
    assert_eq!(unique.len(), records.len());
    assert!(unique.iter().all(|id| id.starts_with("burst-")));
}

// ---------------------------------------------------------------------------------------------
// 9. Graceful shutdown.

#[test]
fn sigterm_during_a_burst_writes_every_answered_violation() {
    let env = Env::new();
    let mut agent = env.start(&[]);
    let answered = Mutex::new(Vec::<String>::new());
    let attempted = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for t in 0..8 {
            let agent = &agent;
            let answered = &answered;
            let attempted = &attempted;
            scope.spawn(move || {
                let client = plain_client();
                for i in 0..100_000 {
                    let uid = format!("term-{t}-{i:06}");
                    attempted.fetch_add(1, Ordering::AcqRel);
                    let response = client
                        .post(validate_url(agent))
                        .header("Content-Type", "application/json")
                        .body(violation(&uid, "prod").to_string())
                        .send()
                        .and_then(|r| r.json::<Value>());
                    match response {
                        Ok(review) => {
                            assert_eq!(review["response"]["uid"], uid.as_str());
                            assert_eq!(review["response"]["allowed"], false);
                            answered.lock().unwrap().push(uid);
                        }
                        Err(_) => return,
                    }
                }
            });
        }
        wait_until("a burst", Duration::from_secs(15), || {
            answered.lock().unwrap().len() >= 300
        });
        agent.signal("TERM");
    });
    let status = agent
        .wait_exit(Duration::from_secs(15))
        .expect("exit after SIGTERM");
    assert!(status.success(), "{status:?}");
    let answered: BTreeSet<String> = answered.into_inner().unwrap().into_iter().collect();
    assert!(
        files(&env.channel, ".open").is_empty(),
        "{:?}",
        entries(&env.channel)
    );
    let on_disk = ids(&all_records(&env.channel));
    let unique: BTreeSet<String> = on_disk.iter().cloned().collect();
    assert_eq!(unique.len(), on_disk.len(), "a record written twice");
    let missing: Vec<&String> = answered.difference(&unique).collect();
    assert!(missing.is_empty(), "answered but not exported: {missing:?}");
    // A request the agent finished while the client lost the connection would be on disk
    // but not answered; there is none in practice.
    let extra: Vec<&String> = unique.difference(&answered).collect();
    assert!(extra.is_empty(), "exported but never answered: {extra:?}");
    eprintln!(
        "sigterm burst: {} attempted, {} answered and on disk",
        attempted.load(Ordering::Acquire),
        answered.len()
    );
}

#[test]
fn sigterm_drains_a_queue_held_by_a_slow_publisher() {
    let env = Env::new();
    let gate = Gate::new(&env.free);
    let mut agent = env.start(&["--export-free-space-file", env.free.to_str().unwrap()]);
    let client = plain_client();
    let uids: Vec<String> = (0..200).map(|i| format!("drain-{i:03}")).collect();
    for uid in &uids {
        send_denied(&client, &agent, &violation(uid, "prod"));
    }
    wait_publisher_blocked(&agent);
    assert_eq!(counts(&agent).queue_messages, 200);
    agent.signal("TERM");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        agent.wait_exit(Duration::from_millis(50)).is_none(),
        "exited before draining"
    );
    // Released within the 5 s drain: everything is written.
    gate.open(|| files(&env.channel, ".log").len() == 1);
    let status = agent.wait_exit(Duration::from_secs(10)).expect("exit");
    assert!(status.success(), "{status:?}");
    assert!(files(&env.channel, ".open").is_empty());
    assert_eq!(ids(&all_records(&env.channel)), uids);
    assert!(
        !agent
            .logs()
            .iter()
            .any(|l| l.contains("export drain did not finish")),
        "{:#?}",
        agent.logs()
    );
}

#[test]
fn sigterm_drops_what_the_drain_cannot_write_in_5_seconds() {
    let env = Env::new();
    let _gate = Gate::new(&env.free);
    let mut agent = env.start(&["--export-free-space-file", env.free.to_str().unwrap()]);
    let client = plain_client();
    for i in 0..200 {
        send_denied(&client, &agent, &violation(&format!("late-{i:03}"), "prod"));
    }
    wait_publisher_blocked(&agent);
    assert_eq!(counts(&agent).queue_messages, 200);
    let signalled = Instant::now();
    agent.signal("TERM");
    // Never released: the drain gives up after 5 s and the agent exits 0 within the
    // shutdown timeout (10 s).
    let status = agent.wait_exit(Duration::from_secs(12)).expect("exit");
    let took = signalled.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(took >= Duration::from_secs(5), "gave up after {took:?}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    // Nothing reached the disk; the drop is reported with the number of records lost.
    assert!(
        files(&env.channel, "").is_empty(),
        "{:?}",
        entries(&env.channel)
    );
    let logs = agent.logs();
    let gave_up: Vec<Value> = logs
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.contains("export drain did not finish"))
        })
        .collect();
    assert_eq!(gave_up.len(), 1, "{logs:#?}");
    assert_eq!(gave_up[0]["queued"], 200, "{:#}", gave_up[0]);
    assert!(
        logs.iter()
            .any(|l| l.contains("\"class\":\"shutdown\"") && l.contains("record dropped")),
        "{logs:#?}"
    );
}
