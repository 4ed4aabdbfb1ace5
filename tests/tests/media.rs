//! Media end to end: blobs uploaded by their SHA-256 and checked, items recorded over them all
//! or none, read back by key and step a page at a time, blobs served byte for byte with cache
//! headers; everything acknowledged survives `kill -9`; a run deleted for good takes the blobs
//! only it named. CI runs these against the local folder and again against S3.

use trainlog_tests::{json, TestServer, Value};

fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Uploads `bytes` as a blob of the run; answers the status, the body and the blob's sha.
fn put_blob(s: &TestServer, run: &str, mime: &str, bytes: &[u8]) -> (u16, Value, String) {
    let sha = sha256_hex(bytes);
    let r = s
        .client
        .put(s.api(&format!("/runs/{run}/media/blobs/{sha}")))
        .header("content-type", mime)
        .body(bytes.to_vec())
        .send()
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap_or(Value::Null), sha)
}

fn image_item(key: &str, step: i64, index: i64, blob: &str) -> Value {
    json!({"key": key, "step": step, "index": index, "kind": "image", "blob": blob, "mime": "image/png",
           "width": 4, "height": 3, "caption": format!("{key} at {step}")})
}

fn field(body: &Value) -> &str {
    body["error"]["field"].as_str().unwrap_or_default()
}

/// Every item of a run under `key`, following the pages of `limit` items.
fn all_items(s: &TestServer, run: &str, key: &str, limit: usize) -> Vec<Value> {
    let mut items = Vec::new();
    let mut token = String::new();
    for _ in 0..100 {
        let (status, page) = s.get(&format!("/runs/{run}/media?key={key}&limit={limit}&page_token={token}"));
        assert_eq!(status, 200, "{page}");
        let got = page["items"].as_array().unwrap();
        assert!(got.len() <= limit);
        items.extend(got.iter().cloned());
        match page["next_page_token"].as_str() {
            Some(t) => token = trainlog_tests::urlencode(t),
            None => return items,
        }
    }
    panic!("more than 100 pages");
}

#[test]
fn storage_media_round_trip_by_key_and_step_with_boxes_masks_and_cache_headers() {
    let s = TestServer::spawn();
    let run = s.create_run("vision", "a");
    let other = s.create_run("vision", "b");

    let pixels: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
    let (status, body, image) = put_blob(&s, &run, "image/png", &pixels);
    assert_eq!(status, 201, "{body}");
    assert_eq!((body["size"].as_u64(), body["mime"].as_str()), (Some(5000), Some("image/png")));
    let (status, _, again) = put_blob(&s, &run, "image/png", &pixels);
    assert_eq!((status, &again), (200, &image), "a blob the project holds is not written again");
    let (_, _, thumb) = put_blob(&s, &run, "image/webp", b"small");
    let (_, _, mask) = put_blob(&s, &run, "image/png", b"mask pixels");

    // A body that is not what its address says is refused, and nothing is stored.
    let wrong = sha256_hex(b"something else");
    let r = s.client.put(s.api(&format!("/runs/{run}/media/blobs/{wrong}"))).body(b"this".to_vec()).send().unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(field(&r.json().unwrap()), "sha256");
    let too_big = vec![0u8; (64 << 20) + 1];
    let (status, body, _) = put_blob(&s, &run, "video/mp4", &too_big);
    assert_eq!((status, body["error"]["code"].as_str()), (413, Some("payload_too_large")), "{body}");
    let (status, body) =
        s.post(&format!("/runs/{run}/media"), &json!({"items": [image_item("samples", 0, 0, &wrong)]}));
    assert_eq!((status, field(&body)), (409, "items[0].blob"), "{body}");

    // An item naming a blob not uploaded refuses the whole request.
    let (status, body) = s.post(
        &format!("/runs/{run}/media"),
        &json!({"items": [image_item("samples", 0, 0, &image), image_item("samples", 0, 1, &"0".repeat(64))]}),
    );
    assert_eq!((status, field(&body)), (409, "items[1].blob"), "{body}");
    assert_eq!(s.get(&format!("/runs/{run}/media/keys")).1["keys"], json!([]), "nothing was half-written");

    // Bad items are refused naming the field.
    for (item, expected) in [
        (json!({"key": "x", "step": -1, "kind": "image", "blob": image, "mime": "image/png"}), "items[0].step"),
        (
            json!({"key": "x", "step": 0, "index": 1000, "kind": "image", "blob": image, "mime": "image/png"}),
            "items[0].index",
        ),
        (json!({"key": "x", "step": 0, "kind": "hologram", "blob": image, "mime": "image/png"}), "items[0].kind"),
        (json!({"key": "x", "step": 0, "kind": "image", "blob": "abc", "mime": "image/png"}), "items[0].blob"),
        (json!({"key": "x", "step": 0, "kind": "image", "blob": image, "mime": "png"}), "items[0].mime"),
        (
            json!({"key": "x", "step": 0, "kind": "image", "blob": image, "mime": "image/png",
                   "boxes": [{"x_min": 0.6, "y_min": 0, "x_max": 0.5, "y_max": 1}]}),
            "items[0].boxes[0]",
        ),
    ] {
        let (status, body) = s.post(&format!("/runs/{run}/media"), &json!({"items": [item]}));
        assert_eq!((status, field(&body)), (400, expected), "{body}");
    }

    let mut boxed = image_item("samples", 10, 1, &image);
    boxed["thumbnail"] = json!(thumb);
    boxed["boxes"] = json!([
        {"group": "predictions", "x_min": 0.1, "y_min": 0.2, "x_max": 0.5, "y_max": 0.9, "class_id": 1, "label": "cat", "score": 0.8},
        {"group": "ground_truth", "x_min": 1, "y_min": 1, "x_max": 3, "y_max": 2, "domain": "pixel", "class_id": 2}
    ]);
    boxed["masks"] = json!([{"group": "truth", "blob": mask}]);
    boxed["class_labels"] = json!({"1": "cat", "2": "dog"});
    let mut items = vec![boxed.clone()];
    for step in [0, 10, 20, 30] {
        items.push(image_item("samples", step, 0, &image));
    }
    items.push(json!({"key": "notes", "step": 5, "kind": "text", "blob": mask, "mime": "text/plain"}));
    let (status, body) = s.post(&format!("/runs/{run}/media"), &json!({ "items": items }));
    assert_eq!((status, body["recorded"].as_u64()), (200, Some(6)), "{body}");

    let (_, keys) = s.get(&format!("/runs/{run}/media/keys"));
    assert_eq!(
        keys["keys"],
        json!([
            {"key": "notes", "kind": "text", "items": 1, "steps": 1, "first_step": 5, "last_step": 5},
            {"key": "samples", "kind": "image", "items": 5, "steps": 4, "first_step": 0, "last_step": 30}
        ])
    );
    assert_eq!(s.get(&format!("/runs/{run}/media/steps?key=samples")).1["steps"], json!([0, 10, 20, 30]));

    // Pages of two cover every item once, by step and index.
    let got = all_items(&s, &run, "samples", 2);
    let order: Vec<(i64, i64)> =
        got.iter().map(|i| (i["step"].as_i64().unwrap(), i["index"].as_i64().unwrap())).collect();
    assert_eq!(order, vec![(0, 0), (10, 0), (10, 1), (20, 0), (30, 0)]);
    let with_boxes = &got[2];
    assert_eq!(with_boxes["boxes"].as_array().unwrap().len(), 2);
    assert_eq!(with_boxes["boxes"][0]["label"], "cat");
    assert_eq!(with_boxes["boxes"][0]["domain"], "fraction");
    assert_eq!(with_boxes["boxes"][1]["domain"], "pixel");
    assert_eq!(with_boxes["boxes"][1]["score"], Value::Null);
    assert_eq!(with_boxes["class_labels"], json!({"1": "cat", "2": "dog"}));
    assert_eq!(with_boxes["masks"][0]["sha256"], mask);
    assert_eq!(with_boxes["thumbnail_sha256"], thumb);
    assert_eq!((with_boxes["caption"].as_str(), with_boxes["size"].as_u64()), (Some("samples at 10"), Some(5000)));
    let (_, ranged) = s.get(&format!("/runs/{run}/media?key=samples&step_min=10&step_max=20"));
    assert_eq!(ranged["items"].as_array().unwrap().len(), 3);
    assert_eq!(s.get(&format!("/runs/{run}/media?page_token=nonsense")).0, 400);
    assert_eq!(s.get(&format!("/runs/{run}/media?limit=0")).0, 400);

    // The bytes, byte for byte, cacheable forever, and 304 when the client has them.
    let url = format!("{}{}", s.url, with_boxes["url"].as_str().unwrap());
    let r = s.client.get(&url).send().unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let headers = r.headers().clone();
    assert_eq!(headers["content-type"], "image/png");
    assert_eq!(headers["etag"].to_str().unwrap(), format!("\"{image}\""));
    assert!(headers["cache-control"].to_str().unwrap().contains("immutable"));
    assert!(headers.get("content-disposition").is_none(), "an image is shown in place");
    assert_eq!(r.bytes().unwrap().to_vec(), pixels);
    let r = s.client.get(&url).header("if-none-match", format!("\"{image}\"")).send().unwrap();
    assert_eq!(r.status().as_u16(), 304);
    let thumb_url = format!("{}{}", s.url, with_boxes["thumbnail_url"].as_str().unwrap());
    assert_eq!(s.client.get(&thumb_url).send().unwrap().bytes().unwrap().to_vec(), b"small".to_vec());

    // A blob is read through a run that names it; another run of the project does not.
    assert_eq!(s.get(&format!("/runs/{other}/media/blobs/{image}")).0, 404);
    assert_eq!(s.get(&format!("/runs/{run}/media/blobs/{}", "0".repeat(64))).0, 404);

    // Bytes that a page could run are served as a download, in a sandbox.
    let (_, _, page) = put_blob(&s, &run, "text/html", b"<script>alert(1)</script>");
    let (status, body) = s.post(
        &format!("/runs/{run}/media"),
        &json!({"items": [{"key": "report", "step": 0, "kind": "file", "blob": page, "mime": "text/html"}]}),
    );
    assert_eq!(status, 200, "{body}");
    let r = s.client.get(s.api(&format!("/runs/{run}/media/blobs/{page}"))).send().unwrap();
    assert_eq!(r.headers()["content-disposition"], "attachment");
    assert!(r.headers()["content-security-policy"].to_str().unwrap().starts_with("sandbox"));

    // Recording an item again at the same place replaces it.
    let mut replaced = image_item("samples", 0, 0, &thumb);
    replaced["caption"] = json!("second try");
    assert_eq!(s.post(&format!("/runs/{run}/media"), &json!({"items": [replaced]})).0, 200);
    let first = &all_items(&s, &run, "samples", 100)[0];
    assert_eq!((first["caption"].as_str(), first["sha256"].as_str()), (Some("second try"), Some(thumb.as_str())));
}

#[test]
fn storage_acknowledged_media_survives_kill9_and_the_index_follows_the_rows() {
    let mut s = TestServer::spawn();
    let run = s.create_run("vision", "crash");
    let mut items = Vec::new();
    let mut blobs = Vec::new();
    for step in 0..20 {
        let bytes = format!("image at step {step}").into_bytes();
        let (status, body, sha) = put_blob(&s, &run, "image/png", &bytes);
        assert_eq!(status, 201, "{body}");
        items.push(image_item("samples", step, 0, &sha));
        blobs.push((sha, bytes));
    }
    assert_eq!(s.post(&format!("/runs/{run}/media"), &json!({ "items": items })).0, 200);
    s.kill9();
    s.restart();
    let got = all_items(&s, &run, "samples", 1000);
    assert_eq!(got.len(), 20, "every acknowledged item is there after kill -9");
    for (item, (sha, bytes)) in got.iter().zip(&blobs) {
        assert_eq!(item["sha256"].as_str(), Some(sha.as_str()));
        let r = s.client.get(format!("{}{}", s.url, item["url"].as_str().unwrap())).send().unwrap();
        assert_eq!(&r.bytes().unwrap().to_vec(), bytes);
    }
    // A flush writes the run's index of media; the counters say so.
    s.flush();
    let (_, stats) = s.get("/admin/stats");
    assert!(stats["media_indexes_written"].as_u64().is_some_and(|n| n >= 1), "{stats}");
    assert_eq!(stats["media_index_failures"], 0, "{stats}");
    if s.store_url().is_none() {
        let indexes: Vec<_> = walk(&s.data.join("store/projects"))
            .into_iter()
            .filter(|p| p.ends_with(format!("media/runs/{run}/index.parquet")))
            .collect();
        assert_eq!(indexes.len(), 1, "one index for the run");
        let head = std::fs::read(&indexes[0]).unwrap();
        assert_eq!(&head[..4], b"PAR1");
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn a_run_deleted_for_good_takes_the_blobs_only_it_named() {
    let s = TestServer::spawn_local();
    let gone = s.create_run("vision", "gone");
    let kept = s.create_run("vision", "kept");
    let (_, _, shared) = put_blob(&s, &gone, "image/png", b"shared bytes");
    let (_, _, own) = put_blob(&s, &gone, "image/png", b"only the purged run's bytes");
    let items = json!({"items": [image_item("a", 0, 0, &shared), image_item("a", 1, 0, &own)]});
    assert_eq!(s.post(&format!("/runs/{gone}/media"), &items).0, 200);
    assert_eq!(s.post(&format!("/runs/{kept}/media"), &json!({"items": [image_item("a", 0, 0, &shared)]})).0, 200);
    s.flush();
    let blob_file =
        |sha: &str| walk(&s.data.join("store/projects")).into_iter().find(|p| p.file_name().is_some_and(|n| n == sha));
    assert!(blob_file(&own).is_some() && blob_file(&shared).is_some());

    assert_eq!(s.post(&format!("/runs/{gone}/archive"), &json!({})).0, 200);
    let r = s.client.delete(s.api(&format!("/runs/{gone}"))).send().unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(blob_file(&own).is_none(), "the blob only the purged run named is deleted");
    assert!(blob_file(&shared).is_some(), "a blob another run names stays");
    assert!(
        !walk(&s.data.join("store/projects"))
            .iter()
            .any(|p| p.to_string_lossy().contains(&format!("media/runs/{gone}"))),
        "the purged run's index is deleted"
    );
    let r = s.client.get(s.api(&format!("/runs/{kept}/media/blobs/{shared}"))).send().unwrap();
    assert_eq!(r.bytes().unwrap().to_vec(), b"shared bytes".to_vec());
}

fn pixels(width: u32, height: u32, seed: u8) -> trainlog::Pixels {
    let data = (0..width * height * 3).map(|i| (i as u8).wrapping_mul(seed)).collect();
    trainlog::Pixels { width, height, channels: 3, data }
}

#[test]
fn the_rust_sdk_logs_media_in_the_background_and_sends_what_an_outage_spooled() {
    let mut s = TestServer::spawn_local();
    let spool = tempfile::tempdir().unwrap();
    let start = |s: &TestServer| {
        trainlog::Run::builder("vision")
            .id("sdk-media")
            .server(&s.url)
            .spool_dir(spool.path())
            .resume(trainlog::Resume::Allow)
            .system_metrics(None)
            .capture_code(false)
            .capture_environment(false)
            .start()
            .unwrap()
    };
    let run = start(&s);
    let mut boxed = trainlog::Media::image(pixels(300, 200, 3)).caption("big");
    boxed.boxes.push(trainlog::media::MediaBox {
        group: "predictions".into(),
        x_min: 0.1,
        y_min: 0.1,
        x_max: 0.4,
        y_max: 0.5,
        domain: trainlog::media::BoxDomain::Fraction,
        class_id: Some(1),
        label: Some("cat".into()),
        score: Some(0.9),
    });
    boxed.masks.push(trainlog::Mask {
        group: "truth".into(),
        class_ids: trainlog::Pixels { width: 300, height: 200, channels: 1, data: vec![1; 60_000] },
    });
    boxed.class_labels.insert(1, "cat".into());
    run.log_media("samples", 0, vec![boxed, trainlog::Media::image(pixels(8, 8, 5))]);
    run.log_media("notes", 0, vec![trainlog::Media::text("hello media")]);
    assert!(run.flush(std::time::Duration::from_secs(10)));
    // The server goes away: what is logged meanwhile waits in the media spool.
    s.kill9();
    for step in 1..4 {
        run.log_media("samples", step, vec![trainlog::Media::image(pixels(8, 8, step as u8))]);
    }
    let summary = run.finish_with("killed", std::time::Duration::from_secs(5)).unwrap();
    assert_eq!(summary.media_sent, 3, "{summary:?}");
    assert_eq!(summary.media_spooled, 3, "{summary:?}");
    assert_eq!((summary.media_rejected, summary.media_dropped), (0, 0));

    s.restart();
    let resumed = start(&s);
    let summary = resumed.finish().unwrap();
    assert_eq!((summary.media_sent, summary.media_spooled), (3, 0), "the resumed run sent the spool: {summary:?}");

    let items = all_items(&s, "sdk-media", "samples", 100);
    let steps: Vec<(i64, i64)> =
        items.iter().map(|i| (i["step"].as_i64().unwrap(), i["index"].as_i64().unwrap())).collect();
    assert_eq!(steps, vec![(0, 0), (0, 1), (1, 0), (2, 0), (3, 0)]);
    let big = &items[0];
    assert_eq!(
        (big["width"].as_u64(), big["height"].as_u64(), big["mime"].as_str()),
        (Some(300), Some(200), Some("image/png"))
    );
    assert_eq!(big["boxes"][0]["label"], "cat");
    assert_eq!(big["class_labels"], json!({"1": "cat"}));
    assert!(big["thumbnail_url"].is_string(), "an image larger than 256 pixels has a thumbnail");
    let png = s.client.get(format!("{}{}", s.url, big["url"].as_str().unwrap())).send().unwrap().bytes().unwrap();
    assert_eq!(&png[..4], b"\x89PNG");
    let text = all_items(&s, "sdk-media", "notes", 10);
    let body = s.client.get(format!("{}{}", s.url, text[0]["url"].as_str().unwrap())).send().unwrap().text().unwrap();
    assert_eq!(body, "hello media");
    assert!(!spool.path().join("media/sdk-media").exists(), "the media spool is gone once sent");
}

#[test]
fn storage_histograms_and_table_parts_read_back_joined_filtered_and_sorted() {
    let s = TestServer::spawn();
    let run = s.create_run("vision", "series");
    let h = |step: i64, counts: Value| json!({"key": "weights/fc", "step": step, "edges": [0, 1, 2], "counts": counts});
    let (status, body) = s
        .post(&format!("/runs/{run}/histograms"), &json!({"histograms": [h(0, json!([1, 2])), h(4, json!([3, 0.5]))]}));
    assert_eq!((status, &body["recorded"]), (200, &json!(2)), "{body}");
    for (bad, expected) in [
        (h(1, json!([1])), "histograms[1].edges"),
        (h(1, json!([1, -1])), "histograms[1].counts"),
        (json!({"key": "w", "step": 1, "edges": [1, 0], "counts": [1]}), "histograms[1].edges"),
    ] {
        let (status, body) =
            s.post(&format!("/runs/{run}/histograms"), &json!({"histograms": [h(9, json!([1, 1])), bad]}));
        assert_eq!((status, field(&body)), (400, expected), "{body}");
    }
    let (_, page) = s.get(&format!("/runs/{run}/histograms?key=weights/fc&limit=1"));
    assert_eq!(page["histograms"][0]["counts"], json!([1.0, 2.0]));
    let token = page["next_page_token"].as_str().unwrap().to_owned();
    let (_, page) = s.get(&format!("/runs/{run}/histograms?key=weights/fc&page_token={token}"));
    assert_eq!(page["histograms"].as_array().unwrap().len(), 1, "a refused request wrote nothing: {page}");
    assert_eq!(page["histograms"][0]["step"], 4);

    let post_table = |step: i64, mode: &str, body: Value| {
        let r = s
            .client
            .post(s.api(&format!("/runs/{run}/tables?key=preds&step={step}&mode={mode}")))
            .json(&body)
            .send()
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().unwrap_or(Value::Null))
    };
    let columns = json!(["id", "label", "score"]);
    let (status, body) = post_table(0, "replace", json!({"columns": columns, "rows": [[0, "cat", 0.5]]}));
    assert_eq!(status, 200, "{body}");
    for step in 1..=3 {
        let rows: Vec<Value> = (0..2).map(|i| json!([step * 10 + i, if i == 0 { "dog" } else { "cat" }, i])).collect();
        let (status, body) = post_table(step, "append", json!({"columns": columns, "rows": rows}));
        assert_eq!((status, &body["mode"]), (200, &json!("append")), "{body}");
    }
    let (status, body) = post_table(4, "append", json!({"columns": ["id", "other"], "rows": [[1, 2]]}));
    assert_eq!((status, field(&body)), (409, "columns"), "{body}");
    let (status, body) = post_table(4, "append", json!({"columns": columns, "rows": [[1, 2]]}));
    assert_eq!((status, field(&body)), (400, "rows[0]"), "{body}");

    let (status, table) = s.get(&format!("/runs/{run}/tables?key=preds"));
    assert_eq!(status, 200, "{table}");
    assert_eq!((table["parts"].as_u64(), table["total_rows"].as_u64()), (Some(4), Some(7)));
    let ids: Vec<i64> = table["rows"].as_array().unwrap().iter().map(|r| r[0].as_i64().unwrap()).collect();
    assert_eq!(ids, vec![0, 10, 11, 20, 21, 30, 31], "every part, in order");
    assert_eq!(table["columns"][2], json!({"name": "score", "type": "float64"}), "integers fit the float column");
    let (_, sorted) =
        s.get(&format!("/runs/{run}/tables?key=preds&sort=id&order=desc&filter_column=label&filter_value=dog&limit=2"));
    assert_eq!(sorted["matched_rows"], 3);
    assert_eq!(sorted["rows"], json!([[30, "dog", 0.0], [20, "dog", 0.0]]));
    let (_, as_of) = s.get(&format!("/runs/{run}/tables?key=preds&step=1"));
    assert_eq!(as_of["total_rows"], 3, "the table as of step 1");
    let (status, body) = s.get(&format!("/runs/{run}/tables?key=preds&sort=nope"));
    assert_eq!((status, field(&body)), (400, "sort"));
    let (status, _) = s.get(&format!("/runs/{run}/tables?key=absent"));
    assert_eq!(status, 404);
    let (_, keys) = s.get(&format!("/runs/{run}/media/keys"));
    let kinds: Vec<(&str, &str)> = keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["key"].as_str().unwrap(), k["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds, vec![("preds", "table"), ("weights/fc", "histogram")]);
    let arrow = s.client.get(s.api(&format!("/runs/{run}/tables?key=preds&format=arrow"))).send().unwrap();
    assert_eq!(arrow.headers()["content-type"], "application/vnd.apache.arrow.stream");
    let bytes = arrow.bytes().unwrap();
    let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes.to_vec()), None).unwrap();
    let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(rows, 7, "the Arrow answer holds every row");
    s.flush();
    if s.store_url().is_none() {
        let files = walk(&s.data.join("store/projects"));
        assert!(files.iter().any(|p| p.ends_with(format!("media/runs/{run}/histograms.parquet"))), "{files:?}");
    }
}

#[test]
fn the_rust_sdk_logs_histograms_and_appends_table_parts_through_an_outage() {
    let mut s = TestServer::spawn_local();
    let spool = tempfile::tempdir().unwrap();
    let start = |s: &TestServer| {
        trainlog::Run::builder("vision")
            .id("sdk-series")
            .server(&s.url)
            .spool_dir(spool.path())
            .resume(trainlog::Resume::Allow)
            .system_metrics(None)
            .capture_code(false)
            .capture_environment(false)
            .start()
            .unwrap()
    };
    let part = |step: i64| {
        trainlog::Media::table_rows(
            vec!["step".into(), "text".into()],
            vec![vec![json!(step), json!(format!("at {step}"))]],
        )
    };
    let run = start(&s);
    run.log_media("weights", 0, vec![trainlog::Media::histogram(vec![0.0, 1.0, 1.0, 2.0, 3.0, 10.0], 4)]);
    run.log_media("preds", 0, vec![part(0)]);
    run.log_media("preds", 1, vec![part(1).append(), part(1).append()]);
    assert!(run.flush(std::time::Duration::from_secs(10)));
    s.kill9();
    run.log_media("preds", 2, vec![part(2).append()]);
    run.log_media("weights", 2, vec![trainlog::Media::histogram_binned(vec![1.0], vec![0.0, 1.0])]);
    let summary = run.finish_with("killed", std::time::Duration::from_secs(5)).unwrap();
    assert_eq!((summary.media_sent, summary.media_spooled), (4, 2), "{summary:?}");

    s.restart();
    let resumed = start(&s);
    let summary = resumed.finish().unwrap();
    assert_eq!((summary.media_sent, summary.media_spooled), (2, 0), "{summary:?}");
    let api = trainlog::Api::new(Some(&s.url)).unwrap();
    let histograms = api.histograms("sdk-series", "weights").unwrap();
    assert_eq!(histograms.len(), 2);
    assert_eq!(histograms[0]["edges"], json!([0.0, 2.5, 5.0, 7.5, 10.0]), "numpy's edges");
    assert_eq!(histograms[0]["counts"], json!([4.0, 1.0, 0.0, 1.0]), "numpy's counts");
    let (_, table) = s.get("/runs/sdk-series/tables?key=preds");
    let steps: Vec<i64> = table["rows"].as_array().unwrap().iter().map(|r| r[0].as_i64().unwrap()).collect();
    assert_eq!(steps, vec![0, 1, 1, 2], "two parts appended at one step both stay: {table}");
    let ipc = api.table_arrow("sdk-series", "preds", Some(1)).unwrap();
    let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(ipc), None).unwrap();
    assert_eq!(reader.map(|b| b.unwrap().num_rows()).sum::<usize>(), 3);
}
