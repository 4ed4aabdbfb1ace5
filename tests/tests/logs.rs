//! Console logs through the real server: what a batch of lines may hold (each refusal names its
//! field and writes nothing), a batch sent twice kept once, reads filtered, searched and paged,
//! lines back after a `kill -9`, a Parquet file per run once flushed, and a follow that streams
//! new lines and ends with the run.

use std::io::{BufRead, BufReader};
use std::time::Duration;
use trainlog_tests::{json, TestServer, Value};

fn line(seq: u64, step: Option<i64>, stream: &str, text: &str) -> Value {
    json!({"seq": seq, "time": 1_700_000_000_000i64 + seq as i64, "step": step, "stream": stream, "text": text})
}

fn batch(process: &str, rank: u32, lines: Vec<Value>) -> Value {
    json!({"process": process, "rank": rank, "node": format!("node-{rank}"), "attempt": 1, "lines": lines})
}

fn read(s: &TestServer, run: &str, query: &str) -> Value {
    let (status, page) = s.get(&format!("/runs/{run}/logs?{query}"));
    assert_eq!(status, 200, "{page}");
    page
}

fn texts(page: &Value) -> Vec<String> {
    page["lines"].as_array().unwrap().iter().map(|l| l["text"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn a_refused_batch_names_its_field_and_writes_nothing() {
    let s = TestServer::spawn();
    let run = s.create_run("logs", "refusals");
    let path = format!("/runs/{run}/logs");
    let good = line(0, None, "stdout", "fine");
    let refusals = [
        (batch("p1", 0, vec![good.clone(), line(1, None, "stdin", "x")]), "lines[1].stream"),
        (batch("p1", 0, vec![good.clone(), line(1, None, "stdout", "two\nlines")]), "lines[1].text"),
        (batch("p1", 0, vec![good.clone(), line(1, None, "stdout", &"x".repeat(17_000))]), "lines[1].text"),
        (batch("a b", 0, vec![good.clone()]), "process"),
        (batch("p1", 0, (0..10_001).map(|i| line(i, None, "stdout", "x")).collect()), "lines"),
        (json!({"process": "p1", "attempt": -1, "lines": [good.clone()]}), "attempt"),
        (json!({"process": "p1", "lines": [good.clone()], "extra": 1}), "extra"),
    ];
    for (body, field) in refusals {
        let (status, answer) = s.post(&path, &body);
        assert_eq!(status, 400, "{answer}");
        assert!(answer["error"]["field"].as_str().unwrap_or("").contains(field), "{field}: {answer}");
    }
    assert_eq!(read(&s, &run, "")["total"], 0, "nothing of a refused batch is kept");
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=10001", "limit"),
        ("q=(unclosed&regex=true", "q"),
        ("rank=one", "rank"),
        ("stream=stdin", "stream"),
        ("offset=3&tail=true", "tail"),
    ] {
        let (status, answer) = s.get(&format!("{path}?{query}"));
        assert_eq!(status, 400, "{query}: {answer}");
        assert_eq!(answer["error"]["field"], field, "{query}: {answer}");
    }
    let (status, _) = s.get("/runs/0123456789abcdef0123456789abcdef/logs");
    assert_eq!(status, 404);
}

#[test]
fn lines_are_kept_once_filtered_searched_paged_and_back_after_a_kill_9() {
    let mut s = TestServer::spawn();
    let run = s.create_run("logs", "two ranks");
    let path = format!("/runs/{run}/logs");
    let rank0 =
        batch("p0", 0, (0..100).map(|i| line(i, Some(i as i64 / 10), "stdout", &format!("step line {i}"))).collect());
    let rank2 = batch(
        "p2",
        2,
        vec![
            line(0, Some(5), "stderr", "Traceback (most recent call last):"),
            line(1, Some(5), "stderr", "  File \"train.py\", line 9, in <module>"),
            line(2, Some(5), "stderr", "\u{1b}[31mRuntimeError: CUDA error: out of memory\u{1b}[0m"),
        ],
    );
    for body in [&rank0, &rank2, &rank0] {
        let (status, answer) = s.post(&path, body);
        assert_eq!(status, 200, "{answer}");
    }
    let all = read(&s, &run, "");
    assert_eq!(all["total"], 103, "the batch sent twice is kept once");
    assert_eq!(all["ranks"], json!([0, 2]));
    assert_eq!(all["streams"], json!(["stderr", "stdout"]));
    let ns: Vec<u64> = all["lines"].as_array().unwrap().iter().map(|l| l["n"].as_u64().unwrap()).collect();
    assert_eq!(ns, (0..103).collect::<Vec<_>>());

    let error = read(&s, &run, "q=runtimeerror");
    assert_eq!(error["matched"], 1);
    assert_eq!(error["lines"][0]["rank"], 2);
    assert_eq!(error["lines"][0]["node"], "node-2");
    assert_eq!(error["lines"][0]["attempt"], 1);
    assert_eq!(read(&s, &run, "q=%5E%5Cw%2BError%3A&regex=true")["matched"], 1, "the regex sees no colours");
    assert_eq!(read(&s, &run, "rank=2&stream=stderr")["matched"], 3);
    assert_eq!(read(&s, &run, "rank=0,2&step_min=9")["matched"], 10);
    assert_eq!(texts(&read(&s, &run, "rank=0&tail=true&limit=2")), vec!["step line 98", "step line 99"]);
    let page = read(&s, &run, "rank=0&offset=10&limit=5");
    assert_eq!((page["offset"].as_u64(), page["matched"].as_u64()), (Some(10), Some(100)));
    assert_eq!(texts(&page)[0], "step line 10");
    let at = read(&s, &run, "rank=0&at_step=7&limit=1");
    assert_eq!(texts(&at), vec!["step line 70"]);
    let last_n = all["lines"][101]["n"].as_u64().unwrap();
    assert_eq!(read(&s, &run, &format!("after={last_n}"))["lines"].as_array().unwrap().len(), 1);

    // Acknowledged lines are in the console's log: a kill -9 loses none.
    s.kill9();
    s.restart();
    let again = read(&s, &run, "");
    assert_eq!(again["total"], 103);
    assert_eq!(again["lines"], all["lines"]);

    // Flushed, a run's lines are a Parquet file beside its series.
    s.flush();
    let files = s.object_keys("projects/");
    assert!(files.iter().any(|k| k.contains(&format!("/console/{run}/")) && k.ends_with(".parquet")), "{files:?}");
    assert_eq!(read(&s, &run, "")["lines"], all["lines"]);
}

#[test]
fn a_follow_streams_new_lines_and_ends_once_the_run_has_ended() {
    let s = TestServer::spawn();
    let run = s.create_run("logs", "followed");
    let path = format!("/runs/{run}/logs");
    let (status, _) = s.post(&path, &batch("p0", 0, vec![line(0, None, "stdout", "before the follow")]));
    assert_eq!(status, 200);
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
    let response = client.get(s.api(&format!("{path}?follow=true"))).send().unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for l in BufReader::new(response).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut events: Vec<(String, Value)> = Vec::new();
    let mut name = String::new();
    let mut next = |events: &mut Vec<(String, Value)>| loop {
        let l = rx.recv_timeout(Duration::from_secs(30)).expect("the stream goes on");
        if let Some(n) = l.strip_prefix("event: ") {
            name = n.to_owned();
        } else if let Some(data) = l.strip_prefix("data: ") {
            events.push((name.clone(), serde_json::from_str(data).unwrap()));
            return;
        }
    };
    next(&mut events);
    assert_eq!(texts(&events[0].1), vec!["before the follow"]);
    let (status, _) =
        s.post(&path, &batch("p0", 0, vec![line(1, Some(1), "stdout", "new 1"), line(2, Some(1), "stderr", "new 2")]));
    assert_eq!(status, 200);
    next(&mut events);
    assert_eq!(texts(&events[1].1), vec!["new 1", "new 2"]);
    let (status, _) = s.post(&format!("/runs/{run}/finish"), &json!({"status": "finished"}));
    assert_eq!(status, 200);
    next(&mut events);
    assert_eq!(events[2].0, "end");
    reader.join().unwrap();
}
