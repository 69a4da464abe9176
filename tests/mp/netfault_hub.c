/* A userspace network emulator for tests/mp/netfault.sh, for kernels without sch_netem:
 * an Ethernet switch between veth ports that delays, drops and reorders frames.
 *
 *   netfault_hub --ports IF,IF,... [--delay-ms D] [--jitter-ms J] [--loss PCT]
 *                [--reorder PCT] [--seed S]
 *
 * Run inside the namespace that holds the ports (ip netns exec). Every frame that comes
 * in on one port goes out on the port where its destination MAC was last seen as a
 * source (else on every other port), after D ms plus a uniform 0..J ms; with
 * probability PCT % (--loss) a copy is dropped instead; with probability PCT %
 * (--reorder) it goes out at once, ahead of the delayed frames before it (netem's
 * "delay D reorder PCT"). Frames keep their checksum-offload and segmentation metadata
 * (PACKET_VNET_HDR), so the ports need no offload settings.
 *
 * Prints "hub: ready" once every port is open; on SIGTERM or SIGINT it prints
 * "hub: forwarded F lost L reordered R overflow O" and exits 0. Nothing here is linked
 * to ringlet.
 */
#include <errno.h>
#include <linux/if_packet.h>
#include <linux/virtio_net.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PORTS 16
#define MAX_QUEUED 20000          /* frames waiting; more are dropped (counted as overflow) */
#define FRAME_MAX (65536 + 64)    /* vnet header + the largest frame a port may hand us */
#define VNET_LEN ((int)sizeof(struct virtio_net_hdr))

typedef struct frame {
    double due;
    uint64_t seq;
    int out;
    size_t len;
    unsigned char data[];
} frame;

static frame *heap[MAX_QUEUED];
static int nheap;
static volatile sig_atomic_t quit;

static void on_signal(int sig) { (void)sig; quit = 1; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng_state;
/* Uniform in [0, 1). xorshift64*. */
static double rnd(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545F4914F6CDD1DULL) >> 11) * 0x1.0p-53;
}

static int earlier(const frame *a, const frame *b) { return a->due < b->due || (a->due == b->due && a->seq < b->seq); }

static void heap_push(frame *f) {
    int i = nheap++;
    heap[i] = f;
    while (i > 0 && earlier(heap[i], heap[(i - 1) / 2])) {
        frame *t = heap[i];
        heap[i] = heap[(i - 1) / 2];
        heap[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static frame *heap_pop(void) {
    frame *top = heap[0];
    heap[0] = heap[--nheap];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < nheap && earlier(heap[l], heap[m])) m = l;
        if (r < nheap && earlier(heap[r], heap[m])) m = r;
        if (m == i) break;
        frame *t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
    return top;
}

static struct {
    unsigned char mac[6];
    int port;
} macs[256];
static int nmacs;

static void learn(const unsigned char *mac, int port) {
    if (mac[0] & 1) return; /* a multicast source is bogus */
    for (int i = 0; i < nmacs; i++)
        if (memcmp(macs[i].mac, mac, 6) == 0) {
            macs[i].port = port;
            return;
        }
    if (nmacs < (int)(sizeof macs / sizeof macs[0])) {
        memcpy(macs[nmacs].mac, mac, 6);
        macs[nmacs++].port = port;
    }
}

static int lookup(const unsigned char *mac) {
    if (mac[0] & 1) return -1; /* broadcast or multicast: flood */
    for (int i = 0; i < nmacs; i++)
        if (memcmp(macs[i].mac, mac, 6) == 0) return macs[i].port;
    return -1;
}

static int open_port(const char *name) {
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (fd < 0) return -1;
    int one = 1, big = 4 << 20;
    unsigned idx = if_nametoindex(name);
    struct sockaddr_ll sll;
    memset(&sll, 0, sizeof sll);
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = (int)idx;
    if (idx == 0 || setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0 ||
        setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&sll, sizeof sll) != 0) {
        close(fd);
        return -1;
    }
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    return fd;
}

int main(int argc, char **argv) {
    char *ports = NULL;
    double delay = 0, jitter = 0, loss = 0, reorder = 0;
    unsigned long long seed = 1;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) {
            ports = NULL;
            break;
        }
        if (strcmp(argv[i], "--ports") == 0) ports = argv[++i];
        else if (strcmp(argv[i], "--delay-ms") == 0) delay = atof(argv[++i]) / 1000.0;
        else if (strcmp(argv[i], "--jitter-ms") == 0) jitter = atof(argv[++i]) / 1000.0;
        else if (strcmp(argv[i], "--loss") == 0) loss = atof(argv[++i]) / 100.0;
        else if (strcmp(argv[i], "--reorder") == 0) reorder = atof(argv[++i]) / 100.0;
        else if (strcmp(argv[i], "--seed") == 0) seed = strtoull(argv[++i], NULL, 0);
        else {
            ports = NULL;
            break;
        }
    }
    if (!ports || delay < 0 || jitter < 0 || loss < 0 || loss > 1 || reorder < 0 || reorder > 1) {
        fprintf(stderr, "usage: netfault_hub --ports IF,IF,... [--delay-ms D] [--jitter-ms J] [--loss PCT] "
                        "[--reorder PCT] [--seed S]\n");
        return 2;
    }
    /* If the script dies without cleaning up (SIGKILL), so does this process, even a
     * stopped one. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    rng_state = seed * 0x9E3779B97F4A7C15ULL + 1;
    setvbuf(stdout, NULL, _IOLBF, 0);

    int fds[MAX_PORTS], n = 0;
    for (char *save = NULL, *p = strtok_r(ports, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        if (n == MAX_PORTS) {
            fprintf(stderr, "hub: at most %d ports\n", MAX_PORTS);
            return 2;
        }
        if ((fds[n] = open_port(p)) < 0) {
            fprintf(stderr, "hub: cannot open port %s: %s\n", p, strerror(errno));
            return 1;
        }
        n++;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    printf("hub: ready (%d ports, delay %.1f ms, jitter %.1f ms, loss %.2f %%, reorder %.2f %%)\n", n, delay * 1e3,
           jitter * 1e3, loss * 100, reorder * 100);

    static unsigned char buf[FRAME_MAX];
    unsigned long long forwarded = 0, lost = 0, reordered = 0, overflow = 0, seq = 0;
    struct pollfd pf[MAX_PORTS];
    while (!quit) {
        double now = now_s();
        while (nheap > 0 && heap[0]->due <= now) {
            frame *f = heap_pop();
            /* A full send queue or a port that went down: the frame is lost, as on a wire. */
            if (send(fds[f->out], f->data, f->len, MSG_DONTWAIT) == (ssize_t)f->len) forwarded++;
            else overflow++;
            free(f);
        }
        double wait = nheap > 0 ? heap[0]->due - now : 0.1;
        if (wait > 0.1) wait = 0.1;
        struct timespec ts = {0, (long)(wait * 1e9)};
        for (int i = 0; i < n; i++) pf[i] = (struct pollfd){fds[i], POLLIN, 0};
        if (ppoll(pf, (nfds_t)n, &ts, NULL) <= 0) continue;
        now = now_s();
        for (int in = 0; in < n; in++) {
            if (!(pf[in].revents & POLLIN)) continue;
            for (int k = 0; k < 64; k++) {
                ssize_t len = recv(fds[in], buf, sizeof buf, MSG_DONTWAIT);
                if (len < VNET_LEN + 14) break;
                /* The delay counts from this frame's arrival, which can be after the poll
                 * returned (the hub may be descheduled between two recvs): never less. */
                now = now_s();
                const unsigned char *eth = buf + VNET_LEN;
                learn(eth + 6, in);
                int to = lookup(eth);
                for (int out = 0; out < n; out++) {
                    if (out == in || (to >= 0 && out != to)) continue;
                    if (loss > 0 && rnd() < loss) {
                        lost++;
                        continue;
                    }
                    double d = delay + (jitter > 0 ? jitter * rnd() : 0);
                    if (reorder > 0 && rnd() < reorder) {
                        d = 0;
                        reordered++;
                    }
                    frame *f = nheap < MAX_QUEUED ? malloc(sizeof *f + (size_t)len) : NULL;
                    if (!f) {
                        overflow++;
                        continue;
                    }
                    f->due = now + d;
                    f->seq = seq++;
                    f->out = out;
                    f->len = (size_t)len;
                    memcpy(f->data, buf, (size_t)len);
                    heap_push(f);
                }
            }
        }
    }
    while (nheap > 0) free(heap_pop());
    printf("hub: forwarded %llu lost %llu reordered %llu overflow %llu\n", forwarded, lost, reordered, overflow);
    return 0;
}
