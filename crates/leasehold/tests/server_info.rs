//! What a server says of itself is read as bytes: INFO holds paths of its
//! host (its executable, its config file), which need not be UTF-8. Alone
//! in its file, since it points the test kit at a binary of its own for the
//! whole process.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use leasehold::Client;
use leasehold_testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_installed_under_a_path_that_is_not_utf8_takes_locks() {
    let binary = leasehold_testkit::redis_server_path().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Latin-1 "bin-é": a byte that UTF-8 never has alone.
    let odd = dir.path().join(OsStr::from_bytes(b"bin-\xe9"));
    std::fs::create_dir(&odd).unwrap();
    let link = odd.join(binary.file_name().unwrap());
    std::os::unix::fs::symlink(&binary, &link).unwrap();
    std::env::set_var("LEASEHOLD_REDIS_SERVER", &link);
    let server = RedisServer::start();
    let info = server.command(&["INFO", "server"]).unwrap();
    assert!(info.contains("bin-"), "{info}");

    let client = Client::open(&server.url()).unwrap();
    let mutex = client.mutex("job").unwrap();
    let guard = mutex.acquire().await.unwrap();
    assert!(mutex.inspect().await.unwrap().held);
    guard.release().await.unwrap();
    assert!(!mutex.inspect().await.unwrap().held);
}
