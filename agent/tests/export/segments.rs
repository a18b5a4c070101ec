//! Sections 2-5: rotation, retention, oversized records and the free-space reserve.

use crate::env::*;

#[test]
fn a_segment_is_completed_at_1000_records() {
    let env = Env::new();
    let mut agent = env.start(&[]);
    let client = plain_client();
    let uids: Vec<String> = (0..=SEGMENT_RECORDS).map(|i| format!("r-{i:05}")).collect();
    for uid in &uids {
        send_denied(&client, &agent, &violation(uid, "prod"));
    }
    wait_published(&agent, uids.len() as u64);
    let logs = files(&env.channel, ".log");
    let open = files(&env.channel, ".open");
    assert_eq!(logs.len(), 1, "{:?}", entries(&env.channel));
    assert_eq!(open.len(), 1, "{:?}", entries(&env.channel));
    assert_eq!(line_count(&logs[0]), SEGMENT_RECORDS);
    assert_eq!(line_count(&open[0]), 1);
    stop(&mut agent);

    let logs = files(&env.channel, ".log");
    assert_eq!(logs.len(), 2, "{:?}", entries(&env.channel));
    let first = segment_records(&logs[0]);
    assert_eq!(ids(&first), uids[..SEGMENT_RECORDS].to_vec());
    assert_eq!(
        ids(&segment_records(&logs[1])),
        vec![uids[SEGMENT_RECORDS].clone()]
    );
    assert!(files(&env.channel, ".open").is_empty());
}

#[test]
fn a_segment_is_completed_before_it_would_pass_1_mib() {
    let env = Env::new();
    let mut agent = env.start(&[]);
    let client = plain_client();
    // 70 records of 30–50 KiB, of varying sizes: about 2.7 MiB.
    let uids: Vec<String> = (0..70).map(|i| format!("big-{i:03}")).collect();
    for (i, uid) in uids.iter().enumerate() {
        send_denied(
            &client,
            &agent,
            &big_violation(uid, 30_000 + (i * 7919) % 20_000),
        );
    }
    wait_published(&agent, uids.len() as u64);
    stop(&mut agent);

    let logs = files(&env.channel, ".log");
    assert!(logs.len() >= 3, "{:?}", entries(&env.channel));
    let mut records = Vec::new();
    for (i, log) in logs.iter().enumerate() {
        let size = fs::metadata(log).unwrap().len();
        assert!(size <= SEGMENT_BYTES, "{} is {size} bytes", log.display());
        assert!(line_count(log) < SEGMENT_RECORDS);
        if let Some(next) = logs.get(i + 1) {
            // Completed for size: the next record (with its newline) would not have fit.
            let text = fs::read_to_string(next).unwrap();
            let next_line = text.lines().next().unwrap().len() as u64 + 1;
            assert!(
                size + next_line > SEGMENT_BYTES,
                "{} completed at {size} bytes although the next record of {next_line} bytes fit",
                log.display()
            );
        }
        records.extend(segment_records(log));
    }
    assert_eq!(ids(&records), uids);
}

#[test]
fn an_open_segment_is_completed_after_a_minute_without_new_records() {
    let env = Env::new();
    let mut agent = env.start_with_clock(&[]);
    let client = plain_client();
    for i in 0..3 {
        send_denied(&client, &agent, &violation(&format!("m-{i}"), "prod"));
    }
    wait_published(&agent, 3);
    let open = files(&env.channel, ".open");
    assert_eq!(open.len(), 1, "{:?}", entries(&env.channel));
    let name = open[0].file_name().unwrap().to_str().unwrap().to_owned();
    assert!(
        name.starts_with("admission-20300101T000000.000000Z-"),
        "the name carries the export clock's time: {name}"
    );
    assert!(files(&env.channel, ".log").is_empty());

    // 59 s: not yet (the janitor ticks every second).
    env.set_clock(59);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        files(&env.channel, ".open"),
        open,
        "completed before a minute"
    );
    assert!(files(&env.channel, ".log").is_empty());

    // 61 s: completed by the janitor, with no new record.
    env.set_clock(61);
    wait_until(
        "the open segment to be completed",
        Duration::from_secs(5),
        || files(&env.channel, ".open").is_empty(),
    );
    let logs = files(&env.channel, ".log");
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0], open[0].with_extension("log"));
    let records = segment_records(&logs[0]);
    assert_eq!(ids(&records), ["m-0", "m-1", "m-2"]);
    for record in &records {
        assert_eq!(record["timestamp"], "2030-01-01T00:00:00.000000Z");
    }

    // The next record opens a new segment, named by the clock's time.
    send_denied(&client, &agent, &violation("m-3", "prod"));
    wait_published(&agent, 4);
    let open = files(&env.channel, ".open");
    assert_eq!(open.len(), 1);
    assert!(
        open[0]
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("admission-20300101T000101.000000Z-"),
        "{open:?}"
    );
    stop(&mut agent);
    assert_eq!(
        ids(&all_records(&env.channel)),
        ["m-0", "m-1", "m-2", "m-3"]
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Retention.

#[test]
fn retention_keeps_the_newest_20_completed_segments() {
    let env = Env::new();
    let agent = env.start_with_clock(&[]);
    let client = plain_client();
    // Each record after the clock moved a minute completes the open segment (the publisher
    // checks the age after each batch), so segments hold one or two records: 52 records make
    // at least 26 segments.
    let n = 52u64;
    let uids: Vec<String> = (0..n).map(|i| format!("k-{i:03}")).collect();
    for (i, uid) in uids.iter().enumerate() {
        env.set_clock(i as u64 * 61);
        send_denied(&client, &agent, &violation(uid, "prod"));
        wait_published(&agent, i as u64 + 1);
    }
    // The last record's segment too.
    env.set_clock(n * 61 + 61);
    wait_until(
        "the last segment to be completed",
        Duration::from_secs(5),
        || files(&env.channel, ".open").is_empty(),
    );
    std::thread::sleep(Duration::from_millis(1200));
    let logs = files(&env.channel, ".log");
    assert_eq!(logs.len(), RETAINED_SEGMENTS, "{:?}", entries(&env.channel));
    assert!(files(&env.channel, ".deleting").is_empty());
    // The newest ones: the records kept are the last ones sent, without a gap.
    let kept = ids(&all_records(&env.channel));
    assert!(kept.len() >= RETAINED_SEGMENTS && kept.len() <= 2 * RETAINED_SEGMENTS);
    assert_eq!(kept, uids[uids.len() - kept.len()..].to_vec());
    let c = wait_counts(&agent, "the spool gauges", |c| {
        c.spool_segments == RETAINED_SEGMENTS as u64
    });
    assert_eq!(c.spool_bytes, spool_bytes(&env.channel), "{c:?}");
}

#[test]
fn retention_keeps_the_spool_within_20_mib() {
    let env = Env::new();
    let agent = env.start(&[]);
    // About 27 MiB of records of ~58 KiB.
    let n = 480usize;
    let uids: Vec<String> = (0..n).map(|i| format!("b-{i:04}")).collect();
    let sent = AtomicUsize::new(0);
    let max_seen = Mutex::new((0u64, 0usize));
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        // A watcher: at no moment do the files pass the limits.
        scope.spawn(|| {
            while !done.load(Ordering::Acquire) {
                let bytes = spool_bytes(&env.channel);
                let logs = files(&env.channel, ".log").len();
                let mut max = max_seen.lock().unwrap();
                *max = (max.0.max(bytes), max.1.max(logs));
                drop(max);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        // Two senders, each in its own order; the ids say which came last.
        let chunks: Vec<&[String]> = uids.chunks(n / 2).collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let agent = &agent;
                let sent = &sent;
                scope.spawn(move || {
                    let client = plain_client();
                    for uid in chunk {
                        send_denied(&client, agent, &big_violation(uid, 58_000));
                        sent.fetch_add(1, Ordering::AcqRel);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        wait_published(&agent, n as u64);
        std::thread::sleep(Duration::from_millis(300));
        done.store(true, Ordering::Release);
    });
    let (max_bytes, max_logs) = *max_seen.lock().unwrap();
    assert!(
        max_bytes <= RETAINED_BYTES,
        "the spool reached {max_bytes} bytes"
    );
    assert!(
        max_logs <= RETAINED_SEGMENTS,
        "{max_logs} completed segments"
    );
    let total = spool_bytes(&env.channel);
    assert!(total <= RETAINED_BYTES, "{total}");
    // Only what had to go went: within a segment and a record of the limit.
    assert!(
        total > RETAINED_BYTES - SEGMENT_BYTES - RECORD_LIMIT as u64,
        "retention removed more than needed: {total} bytes left"
    );
    let c = counts(&agent);
    assert_eq!(c.published, n as u64);
    assert_eq!(c.spool_bytes, total, "{c:?}");
    assert_eq!(
        c.spool_segments,
        files(&env.channel, ".log").len() as u64,
        "{c:?}"
    );
    // The oldest went, the newest stayed: what is kept is a suffix of each sender's order.
    let mut kept: BTreeSet<String> = ids(&all_records(&env.channel)).into_iter().collect();
    for open in files(&env.channel, ".open") {
        kept.extend(ids(&segment_records(&open)));
    }
    assert!(kept.len() < n);
    for chunk in uids.chunks(n / 2) {
        let first_kept = chunk
            .iter()
            .position(|u| kept.contains(u))
            .expect("something kept");
        assert!(first_kept > 0, "the oldest record of a sender survived");
        let gaps: Vec<&String> = chunk[first_kept..]
            .iter()
            .filter(|u| !kept.contains(*u))
            .collect();
        assert!(
            gaps.is_empty(),
            "a gap in the kept records: {gaps:?} missing after {}; segments: {:#?}",
            chunk[first_kept],
            files(&env.channel, "")
                .iter()
                .map(|f| (
                    f.clone(),
                    ids(&segment_records(f)).first().cloned(),
                    line_count(f)
                ))
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn retention_removes_completed_segments_older_than_24_hours() {
    let env = Env::new();
    let agent = env.start_with_clock(&[]);
    let client = plain_client();
    let day = 24 * 3600;
    // Segment A made at T0, segment B at T0 + 1 h; each completed by the janitor.
    for (index, (uid, at)) in [("age-a", 0u64), ("age-b", 3600)].into_iter().enumerate() {
        env.set_clock(at);
        let before = files(&env.channel, ".log").len();
        send_denied(&client, &agent, &violation(uid, "prod"));
        wait_published(&agent, index as u64 + 1);
        env.set_clock(at + 61);
        wait_until("age rotation", Duration::from_secs(5), || {
            files(&env.channel, ".log").len() == before + 1
                && files(&env.channel, ".open").is_empty()
        });
    }
    let logs = files(&env.channel, ".log");
    assert_eq!(logs.len(), 2);
    let (a, b) = (logs[0].clone(), logs[1].clone());
    assert_eq!(ids(&segment_records(&a)), ["age-a"]);

    // 24 h and 1 min after A was made: A goes, B (23 h 1 min old) stays.
    env.set_clock(day + 60);
    wait_until("A to be removed", Duration::from_secs(5), || !a.exists());
    std::thread::sleep(Duration::from_millis(1500));
    assert!(b.exists(), "a segment younger than 24 h was removed");
    assert_eq!(files(&env.channel, ".log"), vec![b.clone()]);

    // A day after B: the spool is empty, without a new record.
    env.set_clock(3600 + day + 60);
    wait_until("B to be removed", Duration::from_secs(5), || !b.exists());
    assert!(
        files(&env.channel, "").is_empty(),
        "{:?}",
        entries(&env.channel)
    );
    let c = wait_counts(&agent, "empty spool gauges", |c| c.spool_segments == 0);
    assert_eq!(c.spool_bytes, 0);
    assert_eq!(c.published, 2);
}

// ---------------------------------------------------------------------------------------------
// 4. Oversized records.

#[test]
fn an_oversized_record_is_dropped_and_counted() {
    let env = Env::new();
    let mut agent = env.start(&[]);
    let reference = env.reference();
    let client = plain_client();
    // Calibration: the record of a 1,000-character label; every uid has the same length, so
    // the record of an n-character label is (n - 1000) bytes longer.
    send_both(&client, &agent, &reference, &big_violation("u-calib", 1000));
    wait_published(&agent, 1);
    let open = files(&env.channel, ".open");
    let calibrated = fs::read_to_string(&open[0]).unwrap().trim_end().len();
    let fitting = 1000 + RECORD_LIMIT - calibrated;

    // Exactly 64 KiB: written. One byte more: dropped. 70,000 characters: dropped.
    send_both(
        &client,
        &agent,
        &reference,
        &big_violation("u-fit00", fitting),
    );
    send_both(
        &client,
        &agent,
        &reference,
        &big_violation("u-over0", fitting + 1),
    );
    send_both(
        &client,
        &agent,
        &reference,
        &big_violation("u-huge0", 70_000),
    );
    let c = wait_counts(&agent, "two message_too_large drops", |c| {
        c.dropped("message_too_large") == 2 && c.published == 2 && c.queue_messages == 0
    });
    assert_eq!(c.dropped_total(), 2, "{c:?}");
    // Later records are written.
    send_both(&client, &agent, &reference, &violation("u-after", "prod"));
    let c = wait_published(&agent, 3);
    assert_eq!(c.dropped_total(), 2, "{c:?}");
    stop(&mut agent);

    let logs = files(&env.channel, ".log");
    let text: String = logs
        .iter()
        .map(|l| fs::read_to_string(l).unwrap())
        .collect();
    let lengths: Vec<usize> = text.lines().map(str::len).collect();
    assert_eq!(
        lengths[1], RECORD_LIMIT,
        "the record at the limit is written whole"
    );
    assert_eq!(
        ids(&all_records(&env.channel)),
        ["u-calib", "u-fit00", "u-after"]
    );
}

// ---------------------------------------------------------------------------------------------
// 5. Free-space reserve.

#[test]
fn the_free_space_reserve_refuses_records_and_the_status_says_so() {
    let env = Env::new();
    let mut agent = env.start_with_free_space(PLENTY);
    let reference = env.reference();
    let client = plain_client();
    send_both(&client, &agent, &reference, &violation("ok-01", "prod"));
    wait_published(&agent, 1);
    agent.wait_for_status("an active webhook publish status", |s| {
        let p = webhook_publish_status(s);
        p["active"] == true && p["errors"] == json!([])
    });
    let size = fs::read_to_string(&files(&env.channel, ".open")[0])
        .unwrap()
        .trim_end()
        .len() as u64;

    // Exactly the reserve plus the record: the newline does not fit. Then the bare reserve.
    env.set_free(RESERVE + size);
    send_both(&client, &agent, &reference, &violation("df-01", "prod"));
    wait_counts(&agent, "a disk_full drop", |c| c.dropped("disk_full") == 1);
    env.set_free(RESERVE);
    send_both(&client, &agent, &reference, &violation("df-02", "prod"));
    send_both(&client, &agent, &reference, &violation("df-03", "prod"));
    let c = wait_counts(&agent, "three disk_full drops", |c| {
        c.dropped("disk_full") == 3 && c.queue_messages == 0
    });
    assert_eq!((c.published, c.dropped_total()), (1, 3), "{c:?}");
    let status = agent.wait_for_status("the reserve error in the status", |s| {
        webhook_publish_status(s)["active"] == false
    });
    let publish = webhook_publish_status(&status);
    let errors = publish["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{publish:#}");
    assert_eq!(errors[0]["type"], "Publish");
    let message = errors[0]["message"].as_str().unwrap();
    assert_eq!(
        message,
        format!(
            "free space in {} is below the {RESERVE}-byte reserve",
            env.channel.display()
        )
    );
    assert!(publish["lastAttemptTime"].is_string());
    assert!(publish["lastSuccessTime"].is_string());
    assert_eq!(status["export"]["byPod"]["connectionErrors"], json!([]));

    // One byte more than the reserve, the record and its newline: written again.
    env.set_free(RESERVE + size + 1);
    send_both(&client, &agent, &reference, &violation("ok-02", "prod"));
    wait_published(&agent, 2);
    agent.wait_for_status("the status to recover", |s| {
        let p = webhook_publish_status(s);
        p["active"] == true && p["errors"] == json!([])
    });
    stop(&mut agent);
    assert_eq!(ids(&all_records(&env.channel)), ["ok-01", "ok-02"]);
}
