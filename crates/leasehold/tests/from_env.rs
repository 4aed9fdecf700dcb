//! `Client::from_env`. The environment is shared by the whole process, so
//! this file holds one test alone.

use leasehold::{Client, ClientBuilder};
use leasehold_testkit::{unreachable_url, RedisServer};

async fn reaches(client: Client) -> bool {
    client.mutex("job").unwrap().inspect().await.is_ok()
}

#[tokio::test]
async fn the_url_comes_from_leasehold_url_then_redis_url() {
    let server = RedisServer::start();
    let quick = std::time::Duration::from_millis(500);

    std::env::set_var("LEASEHOLD_URL", server.url());
    std::env::set_var("REDIS_URL", unreachable_url());
    assert!(
        reaches(Client::from_env().unwrap()).await,
        "LEASEHOLD_URL first"
    );

    std::env::set_var("LEASEHOLD_URL", "");
    std::env::set_var("REDIS_URL", server.url());
    let client = ClientBuilder::from_env().command_timeout(quick).build();
    assert!(
        reaches(client.unwrap()).await,
        "an empty LEASEHOLD_URL counts"
    );

    std::env::set_var("LEASEHOLD_URL", "not a url");
    let err = Client::from_env().unwrap_err();
    assert!(err.is_invalid_input(), "{err:?}");

    std::env::remove_var("LEASEHOLD_URL");
    std::env::set_var("REDIS_URL", "");
    let client = ClientBuilder::from_env().build().unwrap();
    assert!(
        format!("{client:?}").contains("127.0.0.1:6379"),
        "not the default: {client:?}"
    );
}
