//! Reading a subject of a JetStream stream back (`intake::SubjectReader`,
//! what a takeover and a settle read) against the machine's NATS server:
//! every message of the subject in `from..=through` arrives, in order,
//! the last one included, whatever other subjects interleave; a message
//! missing before `through` is an error, never the end.

use std::time::Duration;

use ankusa::intake::{Read, SubjectReader};
use async_nats::jetstream;

async fn stream(name: &str) -> (jetstream::Context, jetstream::stream::Stream) {
    let client = async_nats::connect(ankusa_tests::nats::ADDR).await.expect("NATS on 127.0.0.1:4222");
    let js = jetstream::new(client);
    let _ = js.delete_stream(name).await;
    let stream = js
        .create_stream(jetstream::stream::Config {
            name: name.to_string(),
            subjects: vec![format!("{}.>", name.to_lowercase())],
            ..Default::default()
        })
        .await
        .expect("a stream");
    (js, stream)
}

/// What each way of reading returns, which must agree.
async fn read(stream: &jetstream::stream::Stream, subject: &str, from: u64, through: u64) -> Vec<u64> {
    let mut both = Vec::new();
    for way in [Read::Exact, Read::Batched] {
        let wait = Duration::from_secs(2);
        let mut reader = SubjectReader::open(way, stream, subject, from, through, wait).await.expect("open");
        let mut positions = Vec::new();
        while let Some(message) = reader.next().await.expect("read") {
            positions.push(message.position);
        }
        both.push(positions);
    }
    assert_eq!(both[0], both[1], "exact and batched reads agree");
    both.swap_remove(0)
}

#[tokio::test]
async fn a_subject_is_read_whole_through_its_last_message() {
    let name = ankusa_tests::unique_name("READER", "_", "t").to_uppercase();
    let (js, stream) = stream(&name).await;
    let prefix = name.to_lowercase();
    // Two subjects interleaved in bursts, as a node's hooks and outcomes.
    let mut mine = Vec::new();
    for i in 0..300u64 {
        let subject = if i % 7 < 3 { format!("{prefix}.hook.a") } else { format!("{prefix}.outcome.a") };
        let ack = js.publish(subject.clone(), format!("{i}").into()).await.expect("publish").await.expect("ack");
        if subject.ends_with("hook.a") {
            mine.push(ack.sequence);
        }
    }
    let subject = format!("{prefix}.hook.a");
    let last = *mine.last().expect("messages");
    assert_eq!(read(&stream, &subject, 1, last).await, mine, "everything through the last");
    for (from, through) in [(mine[10], mine[40]), (mine[10] + 1, last), (last, last), (1, mine[0])] {
        let expected: Vec<u64> = mine.iter().copied().filter(|p| (from..=through).contains(p)).collect();
        assert_eq!(read(&stream, &subject, from, through).await, expected, "{from}..={through}");
    }
    assert!(read(&stream, &subject, last + 1, last).await.is_empty(), "nothing past the end");
    let _ = js.delete_stream(&name).await;
}

/// An exact read whose last message is missing though the stream still
/// holds its position (a server that lost it) fails rather than ending
/// early, so a takeover never records as taken what it did not read; a
/// range the stream's limits dropped is the end. (An exact read used to
/// end at the first message it could not find.)
#[tokio::test]
async fn a_missing_message_is_an_error_and_a_dropped_range_the_end() {
    let name = ankusa_tests::unique_name("GAP", "_", "t").to_uppercase();
    let (js, stream) = stream(&name).await;
    let subject = format!("{}.hook.a", name.to_lowercase());
    let mut positions = Vec::new();
    for i in 0..10u64 {
        let ack = js.publish(subject.clone(), format!("{i}").into()).await.expect("publish").await.expect("ack");
        positions.push(ack.sequence);
    }
    let (from, through) = (positions[5], positions[9]);
    let wait = Duration::from_secs(2);
    assert!(stream.delete_message(through).await.expect("delete"), "the last message deleted");
    let mut reader = SubjectReader::open(Read::Exact, &stream, &subject, from, through, wait).await.expect("open");
    let mut read = Vec::new();
    let end = loop {
        match reader.next().await {
            Ok(Some(message)) => read.push(message.position),
            other => break other.map(|m| m.map(|m| m.position)),
        }
    };
    assert_eq!(read, positions[5..9]);
    assert!(end.is_err(), "a message missing before `through` is an error: {end:?}");

    stream.purge().sequence(through + 1).await.expect("purge through the range");
    let mut reader = SubjectReader::open(Read::Exact, &stream, &subject, from, through, wait).await.expect("open");
    assert_eq!(reader.next().await.map(|m| m.map(|m| m.position)), Ok(None), "a dropped range is the end");
    let _ = js.delete_stream(&name).await;
}

/// An exact read of a subject that grows while it is read (a node's own
/// subject at its settle) ends at `through` with every message of the
/// range: the server's counts, offset by the messages appended, are
/// checked against the stream's leader.
#[tokio::test]
async fn a_subject_growing_while_it_is_read_is_read_exactly_through_its_range() {
    let name = ankusa_tests::unique_name("GROW", "_", "t").to_uppercase();
    let (js, stream) = stream(&name).await;
    let prefix = name.to_lowercase();
    let subject = format!("{prefix}.hook.a");
    let mut mine = Vec::new();
    for i in 0..400u64 {
        let to = if i % 3 == 0 { format!("{prefix}.outcome.a") } else { subject.clone() };
        let ack = js.publish(to.clone(), format!("{i}").into()).await.expect("publish").await.expect("ack");
        if to == subject {
            mine.push(ack.sequence);
        }
    }
    let through = *mine.last().expect("messages");
    let appending = {
        let (js, subject) = (js.clone(), subject.clone());
        tokio::spawn(async move {
            for i in 0..200u64 {
                js.publish(subject.clone(), format!("late {i}").into()).await.expect("publish").await.expect("ack");
            }
        })
    };
    let wait = Duration::from_secs(2);
    let mut reader = SubjectReader::open(Read::Exact, &stream, &subject, 1, through, wait).await.expect("open");
    let mut read = Vec::new();
    while let Some(message) = reader.next().await.expect("read") {
        read.push(message.position);
    }
    appending.await.expect("appended");
    assert_eq!(read, mine, "exactly the range, in order");
    let _ = js.delete_stream(&name).await;
}
