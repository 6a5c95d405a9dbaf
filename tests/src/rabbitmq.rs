//! A RabbitMQ client for checking what the `rabbitmq` sink published to the
//! machine's broker (127.0.0.1:5672, guest/guest), through lapin rather than
//! the sink's own AMQP code.
//!
//! Each test declares its own uniquely named queue (and exchange). A queue
//! is declared with `x-expires`, so the broker removes it a while after the
//! test stops using it even if the test fails before [`Scratch::delete`];
//! its exchange is auto-deleted with its last binding.

use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};

pub const ADDR: &str = "127.0.0.1:5672";
const URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// How long an unused scratch queue outlives its test, in milliseconds.
const EXPIRES_MS: i64 = 60_000;

/// A message read back from a queue.
pub struct Message {
    pub body: Vec<u8>,
    pub properties: BasicProperties,
}

impl Message {
    /// A header's value as text (string headers) or number (integers).
    pub fn header(&self, name: &str) -> Option<String> {
        let headers = self.properties.headers().as_ref()?;
        match headers.inner().get(name)? {
            AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
            AMQPValue::ShortString(s) => Some(s.to_string()),
            AMQPValue::LongLongInt(n) => Some(n.to_string()),
            other => Some(format!("{other:?}")),
        }
    }
}

/// A queue of a test's own, bound to an exchange of its own when asked.
pub struct Scratch {
    pub queue: String,
    connection: Connection,
    channel: Channel,
}

impl Scratch {
    /// Declare a queue named after `what`, with `arguments` besides its
    /// expiry (`x-max-length`, `x-overflow`...).
    pub async fn queue(what: &str, arguments: &[(&str, AMQPValue)]) -> Scratch {
        let connection = Connection::connect(URL, ConnectionProperties::default())
            .await
            .expect("RabbitMQ answers on 127.0.0.1:5672 (guest/guest)");
        let channel = connection.create_channel().await.expect("a channel");
        let queue = crate::unique_name("ankusa.test", ".", what);
        let mut table = FieldTable::default();
        table.insert("x-expires".into(), AMQPValue::LongLongInt(EXPIRES_MS));
        for (name, value) in arguments {
            table.insert((*name).into(), value.clone());
        }
        let options = QueueDeclareOptions { durable: true, ..Default::default() };
        channel.queue_declare(queue.as_str().into(), options, table).await.expect("queue declared");
        Scratch { queue, connection, channel }
    }

    /// Declare a direct exchange and bind this queue to it under
    /// `routing_key`; the exchange's name.
    pub async fn bind(&self, routing_key: &str) -> String {
        let exchange = format!("{}.exchange", self.queue);
        self.declare_exchange(&exchange).await;
        self.bind_to(&exchange, routing_key).await;
        exchange
    }

    /// Bind this queue to `exchange` under `routing_key`.
    pub async fn bind_to(&self, exchange: &str, routing_key: &str) {
        let (queue, key): (ShortString, ShortString) = (self.queue.as_str().into(), routing_key.into());
        self.channel
            .queue_bind(queue, exchange.into(), key, QueueBindOptions::default(), FieldTable::default())
            .await
            .expect("queue bound");
    }

    /// A direct exchange, auto-deleted once its last binding goes.
    pub async fn declare_exchange(&self, exchange: &str) {
        let options = ExchangeDeclareOptions { durable: true, auto_delete: true, ..Default::default() };
        self.channel
            .exchange_declare(exchange.into(), ExchangeKind::Direct, options, FieldTable::default())
            .await
            .expect("exchange declared");
    }

    /// Take the next message off the queue, if there is one.
    pub async fn get(&self) -> Option<Message> {
        let options = BasicGetOptions { no_ack: true };
        let got = self.channel.basic_get(self.queue.as_str().into(), options).await.expect("basic.get");
        got.map(|m| Message { body: m.delivery.data, properties: m.delivery.properties })
    }

    /// How many messages the queue holds.
    pub async fn count(&self) -> u32 {
        let options = QueueDeclareOptions { passive: true, ..Default::default() };
        let queue = self.channel.queue_declare(self.queue.as_str().into(), options, FieldTable::default()).await;
        queue.expect("the queue exists").message_count()
    }

    /// Remove the queue (its exchange goes with its last binding).
    pub async fn delete(self) {
        let _ = self.channel.queue_delete(self.queue.as_str().into(), QueueDeleteOptions::default()).await;
        let _ = self.connection.close(200, "done".into()).await;
    }
}

/// A stand-in broker that lets a client in, then meets its first publish
/// with `connection.blocked` and nothing else, as RabbitMQ does when a
/// memory or disk alarm stops publishers. (The machine's broker is shared,
/// so its alarms are not for a test to raise.) Speaks just enough AMQP
/// 0-9-1 for a publisher in confirm mode.
pub mod blocking_broker {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    const METHOD: u8 = 1;
    const FRAME_END: u8 = 0xCE;

    /// Serve on a fresh port, blocking with `reason`; returns the address.
    pub async fn start(reason: &'static str) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, reason));
            }
        });
        addr
    }

    async fn send_method(stream: &mut TcpStream, channel: u16, (class, method): (u16, u16), args: &[u8]) {
        let mut payload = [class.to_be_bytes(), method.to_be_bytes()].concat();
        payload.extend_from_slice(args);
        let mut frame = vec![METHOD];
        frame.extend_from_slice(&channel.to_be_bytes());
        frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        frame.extend_from_slice(&payload);
        frame.push(FRAME_END);
        let _ = stream.write_all(&frame).await;
    }

    /// The next frame: its type, channel and, for a method, its id.
    async fn frame(stream: &mut TcpStream) -> Option<(u8, u16, Option<(u16, u16)>)> {
        let kind = stream.read_u8().await.ok()?;
        let channel = stream.read_u16().await.ok()?;
        let size = stream.read_u32().await.ok()? as usize;
        let mut payload = vec![0; size + 1];
        stream.read_exact(&mut payload).await.ok()?;
        let id = (kind == METHOD && size >= 4)
            .then(|| (u16::from_be_bytes([payload[0], payload[1]]), u16::from_be_bytes([payload[2], payload[3]])));
        Some((kind, channel, id))
    }

    fn short(text: &str) -> Vec<u8> {
        [&[text.len() as u8][..], text.as_bytes()].concat()
    }

    fn long(bytes: &[u8]) -> Vec<u8> {
        [&(bytes.len() as u32).to_be_bytes()[..], bytes].concat()
    }

    async fn serve(mut stream: TcpStream, reason: &str) {
        let mut header = [0u8; 8];
        if stream.read_exact(&mut header).await.is_err() || &header != b"AMQP\x00\x00\x09\x01" {
            return;
        }
        // connection.start: version 0-9, no server properties, PLAIN.
        let start = [&[0u8, 9][..], &long(b""), &long(b"PLAIN"), &long(b"en_US")].concat();
        send_method(&mut stream, 0, (10, 10), &start).await;
        while let Some((_, channel, id)) = frame(&mut stream).await {
            match id {
                // start-ok → tune: no channel limit, 128 KiB frames, no heartbeats.
                Some((10, 11)) => {
                    let tune = [&0u16.to_be_bytes()[..], &131_072u32.to_be_bytes(), &0u16.to_be_bytes()].concat();
                    send_method(&mut stream, 0, (10, 30), &tune).await;
                }
                Some((10, 40)) => send_method(&mut stream, 0, (10, 41), &short("")).await,
                Some((20, 10)) => send_method(&mut stream, channel, (20, 11), &long(b"")).await,
                Some((85, 10)) => send_method(&mut stream, channel, (85, 11), &[]).await,
                // basic.publish: block, and never confirm.
                Some((60, 40)) => send_method(&mut stream, 0, (10, 60), &short(reason)).await,
                _ => {}
            }
        }
    }
}
