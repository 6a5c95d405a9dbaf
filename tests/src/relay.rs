//! A TCP relay in front of a real server, whose connections a test can cut
//! (as a server restart or a dropped network path would) while the relay
//! itself keeps accepting new ones.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct Relay {
    pub addr: SocketAddr,
    accept: JoinHandle<()>,
    links: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Relay {
    pub async fn start(target: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the relay");
        let addr = listener.local_addr().expect("relay address");
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let tracked = links.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let link = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                tracked.lock().expect("relay links").push(link);
            }
        });
        Relay { addr, accept, links }
    }

    /// Close every connection made so far, from both ends.
    pub fn cut(&self) -> usize {
        let links: Vec<_> = self.links.lock().expect("relay links").drain(..).collect();
        links.iter().for_each(JoinHandle::abort);
        links.len()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// A server that accepts connections and never says a word (a hung
/// broker); connections are held until the returned task is dropped.
pub async fn silent_server() -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    (addr, task)
}
