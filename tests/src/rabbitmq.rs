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
