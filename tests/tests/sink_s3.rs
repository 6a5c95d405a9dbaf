//! The s3 sink against an S3 API of the test's own (moto in server mode):
//! an object per hook under its templated key with the hook's bytes and
//! content type, a retry rewriting the same object, a missing bucket
//! refused for good, the API killed and restarted mid-run, bad options.

use ankusa_harness::{ErrorClass, Harness, OutcomeExt, SinkUnderTest, TestHook};
use ankusa_tests::moto::Moto;
use serde_json::json;

fn scratch() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

async fn s3(moto: &Moto, bucket_url: &str, key: &str) -> SinkUnderTest {
    Harness::shared()
        .builtin("s3")
        .options(json!({"bucket_url": bucket_url, "key": key, "access_key_id": "AKIDEXAMPLE", "secret_access_key": "secret"}))
        .allow([moto.endpoint()])
        .allow_networks(["127.0.0.0/8"])
        .real_network()
        .load()
        .await
        .expect("the s3 sink loads")
}

#[tokio::test]
async fn writes_each_hook_as_an_object_under_its_key() {
    let moto = Moto::start(&scratch());
    let bucket = moto.create_bucket("hooks").await;
    let sink = s3(&moto, &bucket, "{tenant}/{source}/{date}/{id}.json").await;
    assert!(sink.durable(), "S3 stores an object before it answers");
    let hook = TestHook::new()
        .id("h-1")
        .tenant("acme")
        .source("shop")
        .received_at(1_764_806_400_000)
        .content_type(Some("application/json"))
        .body("{\"n\": 1}");
    sink.deliver(hook.clone(), 1).await.assert_delivered();
    sink.deliver(hook, 2).await.assert_delivered();
    let (status, content_type, body) = moto.get_object(&bucket, "acme/shop/2025/12/04/h-1.json").await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(body, b"{\"n\": 1}");
    assert_eq!(content_type.as_deref(), Some("application/json"));
}

#[tokio::test]
async fn a_missing_bucket_is_permanent_and_a_restarted_api_is_transient_then_delivers() {
    let mut moto = Moto::start(&scratch());
    let missing = s3(&moto, &format!("{}/nowhere", moto.endpoint()), "{id}").await;
    let failure = missing.deliver(TestHook::new(), 1).await.assert_failed(ErrorClass::Permanent).clone();
    assert!(failure.reason.contains("NoSuchBucket"), "{failure}");

    let bucket = moto.create_bucket("restart").await;
    let sink = s3(&moto, &bucket, "{id}").await;
    sink.deliver(TestHook::new().id("before"), 1).await.assert_delivered();
    moto.server.stop(); // its buckets go with it
    sink.deliver(TestHook::new().id("down"), 1).await.assert_failed(ErrorClass::Transient);
    moto.server.resume();
    moto.create_bucket("restart").await;
    sink.deliver(TestHook::new().id("after").body("back"), 2).await.assert_delivered();
    assert_eq!(moto.get_object(&bucket, "after").await.2, b"back");
}

#[tokio::test]
async fn bad_options_are_named() {
    let base =
        json!({"bucket_url": "https://s3.eu-west-1.amazonaws.com/b", "access_key_id": "a", "secret_access_key": "s"});
    for (change, field) in [
        (json!({"key": "{source}/static"}), "`key`"),
        (json!({"key": "{nope}/{id}"}), "`key`"),
        (json!({"bucket_url": "s3://b"}), "`bucket_url`"),
        (json!({"access_key_id": ""}), "`access_key_id`"),
    ] {
        let mut options = base.clone();
        for (k, v) in change.as_object().expect("object") {
            options[k] = v.clone();
        }
        let err = Harness::shared().builtin("s3").options(options).load().await.err().expect("refused").to_string();
        assert!(err.contains(field), "{field}: {err}");
    }
}
