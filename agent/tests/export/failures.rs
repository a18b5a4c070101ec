//! Sections 6-7: kill -9, unwritable directories and unusable Connections.

use crate::env::*;

#[test]
fn a_segment_abandoned_by_kill_9_is_recovered_with_complete_records() {
    let env = Env::new();
    let mut agent = env.start(&[]);
    let stop_sending = AtomicBool::new(false);
    let answered = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for t in 0..4 {
            let agent = &agent;
            let stop_sending = &stop_sending;
            let answered = &answered;
            scope.spawn(move || {
                let client = plain_client();
                for i in 0..5000 {
                    if stop_sending.load(Ordering::Acquire) {
                        return;
                    }
                    // ~4 KiB records: segments complete every ~250 records.
                    let body = big_violation(&format!("kill-{t}-{i:05}"), 4000);
                    match client
                        .post(validate_url(agent))
                        .header("Content-Type", "application/json")
                        .body(body.to_string())
                        .send()
                    {
                        Ok(r) if r.status() == 200 => {
                            answered.fetch_add(1, Ordering::AcqRel);
                        }
                        _ => return,
                    }
                }
            });
        }
        wait_until("records to be written", Duration::from_secs(15), || {
            counts(&agent).published >= 600 && !files(&env.channel, ".open").is_empty()
        });
        agent.signal("KILL");
        stop_sending.store(true, Ordering::Release);
    });
    agent.wait_exit(Duration::from_secs(5)).expect("killed");

    // What the dead writer left: complete segments, and an open one whose complete lines
    // count (a torn last line does not).
    let mut before: Vec<String> = Vec::new();
    for log in files(&env.channel, ".log") {
        before.extend(ids(&segment_records(&log)));
    }
    let open = files(&env.channel, ".open");
    let abandoned = match open.as_slice() {
        [one] => one.clone(),
        // The kill fell between the completion of a segment and the start of the next (rare):
        // leave an abandoned segment as the dead writer would have.
        [] => {
            let path = env
                .channel
                .join("admission-20990101T000000.000000Z-00000000000000aa.open");
            let record = |id: &str| json!({"eventType": "violation_admission", "id": id});
            fs::write(
                &path,
                format!("{}\n{}\n", record("kill-x-1"), record("kill-x-2")),
            )
            .unwrap();
            path
        }
        many => panic!("one writer, one open segment: {many:?}"),
    };
    let content = fs::read(&abandoned).unwrap();
    let complete = content
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let complete_text = String::from_utf8(content[..complete].to_vec()).unwrap();
    for line in complete_text.lines() {
        let record: Value = serde_json::from_str(line).expect("a complete line is JSON");
        before.push(record["id"].as_str().unwrap().to_owned());
    }
    assert!(before.len() >= 600, "{}", before.len());
    // A write cut in the middle (the kill may not have hit one), an abandoned empty segment
    // and a remnant of retention.
    {
        use std::io::Write;
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(&abandoned)
            .unwrap();
        f.write_all(br#"{"eventType":"violation_admission","id":"torn-rec"#)
            .unwrap();
    }
    let empty = env
        .channel
        .join("admission-20200101T000000.000000Z-00000000000000ee.open");
    fs::write(&empty, b"{\"half").unwrap();
    let remnant = env
        .channel
        .join("admission-20200101T000000.000000Z-00000000000000dd.deleting");
    fs::write(&remnant, b"old\n").unwrap();

    // A new process on the same directory recovers it.
    let mut agent = env.start(&[]);
    wait_until("recovery", Duration::from_secs(10), || {
        files(&env.channel, ".open").is_empty() && !remnant.exists()
    });
    assert!(!empty.exists(), "an empty abandoned segment is removed");
    let recovered = abandoned.with_extension("log");
    assert_eq!(
        fs::read_to_string(&recovered).unwrap(),
        complete_text,
        "the recovered segment holds exactly the complete records"
    );
    let after = ids(&all_records(&env.channel));
    assert_eq!(after.len(), before.len(), "every complete record survives");
    assert_eq!(
        after.iter().collect::<BTreeSet<_>>(),
        before.iter().collect::<BTreeSet<_>>()
    );
    assert!(!after.iter().any(|id| id == "torn-rec"));
    // A record can be on disk before its response arrived: at most one per sender.
    assert!(
        before.len() <= answered.load(Ordering::Acquire) + 4 + 2,
        "more records than requests"
    );

    // And goes on exporting.
    send_denied(&plain_client(), &agent, &violation("after-restart", "prod"));
    wait_published(&agent, 1);
    stop(&mut agent);
    let last = ids(&all_records(&env.channel));
    assert_eq!(last.len(), before.len() + 1);
    assert_eq!(last.last().unwrap(), "after-restart");
    assert!(files(&env.channel, ".open").is_empty());
}

// ---------------------------------------------------------------------------------------------
// 7. Unwritable directories and unusable Connections.

#[test]
fn an_unwritable_directory_drops_records_and_the_webhook_still_answers() {
    let env = Env::new();
    let mut agent = env.start_with_clock(&[]);
    let reference = env.reference();
    let client = plain_client();
    send_both(&client, &agent, &reference, &violation("ro-ok-1", "prod"));
    wait_published(&agent, 1);
    // Complete the open segment, so the next record needs a new file.
    env.set_clock(61);
    wait_until(
        "the segment to be completed",
        Duration::from_secs(5),
        || files(&env.channel, ".open").is_empty(),
    );
    agent.wait_for_status("an active publish status", |s| {
        webhook_publish_status(s)["active"] == true
    });

    {
        let guard = ReadOnly::new(&env.channel);
        for i in 0..3 {
            send_both(
                &client,
                &agent,
                &reference,
                &violation(&format!("ro-lost-{i}"), "prod"),
            );
        }
        let c = wait_counts(&agent, "publish_error drops", |c| {
            c.dropped("publish_error") == 3 && c.queue_messages == 0
        });
        assert_eq!(
            (c.published, c.dropped_total()),
            (1, 3),
            "{c:?} ({})",
            guard.how
        );
        let status = agent.wait_for_status("the publish error in the status", |s| {
            webhook_publish_status(s)["active"] == false
        });
        let publish = webhook_publish_status(&status);
        let errors = publish["errors"].as_array().unwrap();
        assert_eq!(errors.len(), 1, "{publish:#}");
        let message = errors[0]["message"].as_str().unwrap();
        assert_eq!(errors[0]["type"], "Publish");
        assert!(
            !message.contains(':'),
            "not coalesced to its class: {message}"
        );
        assert_eq!(
            message,
            format!(
                "cannot create a segment in spool directory {}",
                env.channel.display()
            ),
            "({})",
            guard.how
        );
    }

    // Writable again: exporting resumes without a restart and the status heals.
    send_both(&client, &agent, &reference, &violation("ro-ok-2", "prod"));
    wait_published(&agent, 2);
    agent.wait_for_status("the status to heal", |s| {
        let p = webhook_publish_status(s);
        p["active"] == true && p["errors"] == json!([])
    });
    stop(&mut agent);
    assert_eq!(ids(&all_records(&env.channel)), ["ro-ok-1", "ro-ok-2"]);
}

/// An agent whose Connection cannot be used exports nothing and counts `no_connection`.
fn assert_unusable_connection(env: &Env, want_error: &str, exact: bool) {
    let agent = env.start(&[]);
    let reference = env.reference();
    let status = agent.status();
    let errors = status["export"]["byPod"]["connectionErrors"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(errors.len(), 1, "{:#}", status["export"]);
    assert_eq!(errors[0]["type"], "UpsertConnection");
    let message = errors[0]["message"].as_str().unwrap();
    if exact {
        assert_eq!(message, want_error);
    } else {
        assert!(message.contains(want_error), "{message}");
    }
    assert!(
        !message.contains(':'),
        "not coalesced to its class: {message}"
    );
    assert_eq!(status["export"]["channelDirectory"], Value::Null);
    let client = plain_client();
    send_both(&client, &agent, &reference, &violation("nc-1", "prod"));
    send_both(&client, &agent, &reference, &violation("nc-2", "staging"));
    let c = wait_counts(&agent, "no_connection drops", |c| {
        c.dropped("no_connection") == 2
    });
    assert_eq!((c.published, c.dropped_total()), (0, 2), "{c:?}");
    assert!(
        agent
            .logs()
            .iter()
            .any(|l| l.contains("invalid Connection")),
        "the log says why"
    );
}

#[test]
fn a_connection_whose_path_cannot_be_written_exports_nothing() {
    let env = Env::new();
    let blocker = env.root().join("file");
    fs::write(&blocker, b"a regular file").unwrap();
    fs::write(
        &env.connection,
        connection_yaml("disk", &blocker.join("topics")),
    )
    .unwrap();
    assert_unusable_connection(&env, "is not writable", false);
    assert_eq!(fs::read(&blocker).unwrap(), b"a regular file");
    assert!(!env.topics.exists());
}

#[test]
fn a_connection_with_an_unknown_driver_exports_nothing() {
    let env = Env::new();
    fs::write(&env.connection, connection_yaml("kafka", &env.topics)).unwrap();
    assert_unusable_connection(&env, "unknown driver \"kafka\"", true);
    assert!(
        !env.topics.exists(),
        "nothing created for an unusable Connection"
    );
}
