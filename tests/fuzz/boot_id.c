/* Fuzz target: the unique id (rl_boot_parse_id), 128 bytes a caller hands every rank.
 *   byte 0 & 1: the rank that parses it (0 looks its listener up in this process's
 *   table, which holds none here); then the id's bytes. */
#include <netinet/in.h>
#include <sys/socket.h>

#include "bootstrap.h"
#include "fuzz.h"
#include "netif.h"
#include "sock.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    int rank = fz_u8(&in) & 1;
    ringlet_unique_id_t id;
    fz_take(&in, id.internal, sizeof id.internal);
    rl_boot_target t;
    char err[RL_MSG_MAX] = "";
    ringlet_result_t rc = rl_boot_parse_id(&id, rank, &t, err);
    if (rc != RINGLET_SUCCESS) {
        FZ_CHECK(err[0] && strnlen(err, sizeof err) < sizeof err);
        return 0;
    }
    FZ_CHECK(rank != 0); /* no id was made in this process */
    FZ_CHECK(t.naddr == 1); /* an id carries one address */
    FZ_CHECK(t.addr[0].ss_family == AF_INET || t.addr[0].ss_family == AF_INET6);
    FZ_CHECK(rl_sockaddr_port(&t.addr[0]) != 0 && t.listen_fd == -1);
    FZ_CHECK(rl_sockaddr_len(&t.addr[0]) <= sizeof t.addr[0]);
    char where[96]; /* what client_join prints */
    FZ_CHECK(rl_sockaddr_str((struct sockaddr *)&t.addr[0], where, sizeof where) == 0);
    return 0;
}
