//! The producer side of the Kafka protocol, as much as a sink needs:
//! `Metadata` (v4) to find each partition's leader, `InitProducerId` (v0)
//! for the idempotent producer, and `Produce` (v3) with `acks=all`. These
//! versions are the oldest every broker since Kafka 0.11 and Kafka 4
//! (which dropped older ones) both speak; none is a "flexible" version, so
//! no tagged fields.

pub mod batch;
mod wire;

use std::collections::HashMap;
use std::io::{self, BufReader, Read, Write};
use std::time::Duration;

use ankusa_sdk::tcp::{self, ServerAddr};

use self::batch::{Record, Stamp};
use self::wire::{Decoder, Encoder};

const PRODUCE: i16 = 0;
const METADATA: i16 = 3;
const INIT_PRODUCER_ID: i16 = 22;
/// The largest response read; a metadata answer for one topic is small.
const MAX_RESPONSE: usize = 16 << 20;

#[derive(Debug)]
pub enum KafkaError {
    Io(io::Error),
    /// An error code from the broker, with what it was answering.
    Broker {
        code: i16,
        context: String,
    },
    Protocol(String),
}

/// One broker connection: request, answer, in order.
pub struct Link<S = tcp::Stream> {
    reader: BufReader<S>,
    correlation: i32,
}

impl<S: Read + Write> Link<S> {
    pub fn new(stream: S) -> Link<S> {
        Link { reader: BufReader::new(stream), correlation: 0 }
    }

    /// Send a request (`body` after the v1 header) and return its
    /// response's body.
    pub fn call(&mut self, api_key: i16, version: i16, body: &[u8]) -> Result<Vec<u8>, KafkaError> {
        self.correlation = self.correlation.wrapping_add(1);
        let mut header = Encoder::default();
        header.i16(api_key).i16(version).i32(self.correlation).string("ankusa");
        let header = header.into_bytes();
        let mut frame = Vec::with_capacity(4 + header.len() + body.len());
        frame.extend_from_slice(&((header.len() + body.len()) as i32).to_be_bytes());
        frame.extend_from_slice(&header);
        frame.extend_from_slice(body);
        self.reader.get_mut().write_all(&frame).map_err(KafkaError::Io)?;

        let mut size = [0u8; 4];
        self.reader.read_exact(&mut size).map_err(KafkaError::Io)?;
        let size = i32::from_be_bytes(size);
        let size = usize::try_from(size)
            .ok()
            .filter(|s| (4..=MAX_RESPONSE).contains(s))
            .ok_or_else(|| KafkaError::Protocol(format!("a response of {size} bytes")))?;
        let mut response = vec![0; size];
        self.reader.read_exact(&mut response).map_err(KafkaError::Io)?;
        let correlation = i32::from_be_bytes([response[0], response[1], response[2], response[3]]);
        if correlation != self.correlation {
            return Err(KafkaError::Protocol(format!(
                "the answer to request {} came for request {correlation}",
                self.correlation
            )));
        }
        response.drain(..4);
        Ok(response)
    }
}

/// Where a topic's partitions are led, from a `Metadata` answer.
#[derive(Debug)]
pub struct Topology {
    pub brokers: HashMap<i32, ServerAddr>,
    /// The leader of each partition, by index.
    pub leaders: Vec<i32>,
}

pub fn metadata<S: Read + Write>(link: &mut Link<S>, topic: &str) -> Result<Topology, KafkaError> {
    let mut request = Encoder::default();
    request.i32(1).string(topic).bool(true); // one topic; auto-create if the broker allows
    let body = link.call(METADATA, 4, &request.into_bytes())?;
    let mut d = Decoder::new(&body);
    d.i32()?; // throttle
    let mut brokers = HashMap::new();
    for _ in 0..d.count()? {
        let node = d.i32()?;
        let host = d.string()?;
        let port = d.i32()?;
        d.nullable_string()?; // rack
        let port = u16::try_from(port).map_err(|_| KafkaError::Protocol(format!("broker port {port}")))?;
        brokers.insert(node, ServerAddr { host: host.to_ascii_lowercase(), port });
    }
    d.nullable_string()?; // cluster id
    d.i32()?; // controller
    let mut leaders = Vec::new();
    for _ in 0..d.count()? {
        let code = d.i16()?;
        let name = d.string()?;
        d.bool()?; // internal
        if code != 0 {
            return Err(KafkaError::Broker { code, context: format!("metadata of topic `{name}`") });
        }
        let mut partitions = Vec::new();
        for _ in 0..d.count()? {
            d.i16()?; // the partition's own error: a leader missing shows as -1
            let index = d.i32()?;
            let leader = d.i32()?;
            d.skip_i32_array()?; // replicas
            d.skip_i32_array()?; // in-sync replicas
            partitions.push((index, leader));
        }
        partitions.sort();
        leaders = partitions.into_iter().map(|(_, leader)| leader).collect();
    }
    if leaders.is_empty() {
        return Err(KafkaError::Broker { code: 3, context: format!("metadata of topic `{topic}`") });
    }
    Ok(Topology { brokers, leaders })
}

/// An idempotent producer's identity, from `InitProducerId`.
pub fn init_producer<S: Read + Write>(link: &mut Link<S>, timeout: Duration) -> Result<(i64, i16), KafkaError> {
    let mut request = Encoder::default();
    request.nullable_string(None).i32(i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX));
    let body = link.call(INIT_PRODUCER_ID, 0, &request.into_bytes())?;
    let mut d = Decoder::new(&body);
    d.i32()?; // throttle
    let code = d.i16()?;
    if code != 0 {
        return Err(KafkaError::Broker { code, context: "InitProducerId".into() });
    }
    Ok((d.i64()?, d.i16()?))
}

/// `Produce` one batch to `topic`/`partition` with `acks=all`; the offset
/// the broker gave it.
pub fn produce<S: Read + Write>(
    link: &mut Link<S>,
    topic: &str,
    partition: i32,
    record: &Record,
    stamp: Stamp,
    timeout: Duration,
) -> Result<i64, KafkaError> {
    let records = batch::encode(record, stamp);
    let mut request = Encoder::default();
    request
        .nullable_string(None) // not transactional
        .i16(-1) // acks=all: every in-sync replica has it
        .i32(i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX))
        .i32(1)
        .string(topic)
        .i32(1)
        .i32(partition)
        .bytes(&records);
    let body = link.call(PRODUCE, 3, &request.into_bytes())?;
    let mut d = Decoder::new(&body);
    let mut answer = None;
    for _ in 0..d.count()? {
        d.string()?;
        for _ in 0..d.count()? {
            let index = d.i32()?;
            let code = d.i16()?;
            let offset = d.i64()?;
            d.i64()?; // log append time
            if index == partition {
                answer = Some((code, offset));
            }
        }
    }
    match answer {
        Some((0, offset)) => Ok(offset),
        Some((code, _)) => Err(KafkaError::Broker { code, context: format!("produce to {topic}/{partition}") }),
        None => Err(KafkaError::Protocol(format!("no answer for {topic}/{partition}"))),
    }
}

/// A producer for one topic: connections to the brokers leading its
/// partitions, the idempotent producer's identity and each partition's
/// next sequence number. Dropped whole after any failure, so a fresh one
/// starts from new metadata and a new producer id.
pub struct Producer {
    links: HashMap<i32, Link>,
    topology: Topology,
    producer_id: i64,
    epoch: i16,
    sequences: HashMap<i32, i32>,
    answer_timeout: Duration,
}

impl Producer {
    /// Connect to the first bootstrap server that answers, learn the
    /// topic's leaders and (when `idempotent`) register as an idempotent
    /// producer.
    pub fn open(
        bootstrap: &[ServerAddr],
        topic: &str,
        idempotent: bool,
        answer_timeout: Duration,
    ) -> Result<Producer, KafkaError> {
        let mut last = None;
        for addr in bootstrap {
            match tcp::connect(addr, answer_timeout) {
                Ok(stream) => {
                    let mut link = Link::new(stream);
                    let topology = metadata(&mut link, topic)?;
                    // Without a producer id, batches carry -1 for it, its
                    // epoch and their sequence: the broker checks nothing.
                    let (producer_id, epoch) =
                        if idempotent { init_producer(&mut link, answer_timeout)? } else { (-1, -1) };
                    // The bootstrap connection serves as its node's link
                    // when the node is one of the brokers.
                    let mut links = HashMap::new();
                    if let Some((node, _)) = topology.brokers.iter().find(|(_, a)| *a == addr) {
                        links.insert(*node, link);
                    }
                    return Ok(Producer {
                        links,
                        topology,
                        producer_id,
                        epoch,
                        sequences: HashMap::new(),
                        answer_timeout,
                    });
                }
                Err(error) => last = Some(error),
            }
        }
        Err(KafkaError::Io(last.unwrap_or_else(|| io::ErrorKind::NotFound.into())))
    }

    pub fn partitions(&self) -> usize {
        self.topology.leaders.len()
    }

    /// Produce `record` to `partition` on its leader; its offset.
    pub fn send(&mut self, topic: &str, partition: usize, record: &Record) -> Result<i64, KafkaError> {
        let leader = self.topology.leaders[partition];
        let index = i32::try_from(partition).map_err(|_| KafkaError::Protocol("partition index".into()))?;
        if !self.links.contains_key(&leader) {
            let addr = self.topology.brokers.get(&leader).ok_or_else(|| KafkaError::Broker {
                code: 5,
                context: format!("partition {topic}/{partition} has no leader"),
            })?;
            let stream = tcp::connect(addr, self.answer_timeout).map_err(KafkaError::Io)?;
            self.links.insert(leader, Link::new(stream));
        }
        let sequence = if self.producer_id < 0 { -1 } else { *self.sequences.get(&index).unwrap_or(&0) };
        let stamp = Stamp { producer_id: self.producer_id, epoch: self.epoch, sequence };
        let link = self.links.get_mut(&leader).ok_or_else(|| KafkaError::Protocol("no link".into()))?;
        match produce(link, topic, index, record, stamp, self.answer_timeout) {
            Ok(offset) => {
                self.sequences.insert(index, sequence.wrapping_add(1) & i32::MAX);
                Ok(offset)
            }
            // DUPLICATE_SEQUENCE_NUMBER: this very batch was written before.
            Err(KafkaError::Broker { code: 46, .. }) => {
                self.sequences.insert(index, sequence.wrapping_add(1) & i32::MAX);
                Ok(-1)
            }
            Err(error) => Err(error),
        }
    }
}
