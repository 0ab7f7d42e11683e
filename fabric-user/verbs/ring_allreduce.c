/*
 * fabric-verbs-allreduce: one rank of a ring AllReduce over the kernel's RDMA stack (rdma-core's
 * libibverbs; on rxe devices in this project). `fabric rxe allreduce` starts one per rxe host and
 * turns their reports into a fabric.run/2 result. Built by `cargo xtask vm` / `cargo xtask setup`
 * into the target directory next to `fabric`: cc -O2 ring_allreduce.c -libverbs.
 *
 * Ring AllReduce of `bytes` per rank (uint32 elements summed): n-1 reduce-scatter steps, then n-1
 * all-gather steps; in each step a rank RDMA-WRITEs (with immediate) one chunk to the next rank,
 * striped over `qps` RC QPs, and waits for its own completions and for the previous rank's chunk.
 * Connection details (QPNs, PSNs, GIDs, the receive buffer's address and rkey) go over TCP; so do
 * the barriers between iterations. Prints one JSON object on stdout.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_QPS 64
#define RECV_DEPTH 64

static void die(const char *what) {
    fprintf(stderr, "fabric-verbs-allreduce: %s: %s\n", what, strerror(errno));
    exit(1);
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

struct info {
    uint32_t qpn[MAX_QPS];
    uint32_t psn;
    uint8_t gid[16];
    uint64_t addr;
    uint32_t rkey;
};

static void send_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, 0);
        if (n <= 0) die("tcp send");
        p += n;
        len -= (size_t)n;
    }
}

static void recv_all(int fd, void *buf, size_t len) {
    char *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        if (n <= 0) die("tcp recv");
        p += n;
        len -= (size_t)n;
    }
}

static void modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, const char *what) {
    int rc = ibv_modify_qp(qp, a, mask);
    if (rc) {
        errno = rc;
        die(what);
    }
}

static void to_init(struct ibv_qp *qp) {
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE};
    modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "QP to INIT");
}

static void to_rts(struct ibv_qp *qp, uint32_t dest_qpn, uint32_t rq_psn, const uint8_t *dgid, int gid_index,
                   int tclass, enum ibv_mtu mtu, uint32_t sq_psn, int timeout) {
    struct ibv_qp_attr a = {0};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = dest_qpn;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.traffic_class = (uint8_t)tclass;
    a.ah_attr.port_num = 1;
    modify(qp, &a,
           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
               IBV_QP_MIN_RNR_TIMER,
           "QP to RTR");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = (uint8_t)timeout;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = sq_psn;
    a.max_rd_atomic = 1;
    modify(qp, &a,
           IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
           "QP to RTS");
}

static void post_recv(struct ibv_qp *qp) {
    struct ibv_recv_wr wr = {.wr_id = 0, .sg_list = NULL, .num_sge = 0}, *bad;
    if (ibv_post_recv(qp, &wr, &bad)) die("ibv_post_recv");
}

/* Token twice around the ring: everyone has arrived, then everyone may go. */
static void barrier(int rank, int to_next, int from_prev) {
    char t = 'b';
    for (int round = 0; round < 2; round++) {
        if (rank == 0) {
            send_all(to_next, &t, 1);
            recv_all(from_prev, &t, 1);
        } else {
            recv_all(from_prev, &t, 1);
            send_all(to_next, &t, 1);
        }
    }
}

static void wait_cq(struct ibv_cq *cq, int want, const char *what) {
    struct ibv_wc wc[16];
    while (want > 0) {
        int n = ibv_poll_cq(cq, want < 16 ? want : 16, wc);
        if (n < 0) die("ibv_poll_cq");
        /* Soft-RoCE does its work in the kernel on these CPUs: do not starve it. */
        if (n == 0) usleep(20);
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS) {
                fprintf(stderr, "fabric-verbs-allreduce: %s completion failed: %s (%d)\n", what,
                        ibv_wc_status_str(wc[i].status), wc[i].status);
                exit(1);
            }
        }
        want -= n;
    }
}

int main(int argc, char **argv) {
    const char *dev_name = NULL, *next_ip = NULL;
    int gid_index = -1, rank = -1, ranks = 0, port_base = 19000, qps = 1, tclass = 0, iters = 1, timeout = 18;
    uint64_t bytes = 1 << 20;
    static struct option opts[] = {{"dev", 1, 0, 'd'},   {"gid-index", 1, 0, 'x'}, {"rank", 1, 0, 'r'},
                                   {"ranks", 1, 0, 'n'}, {"port-base", 1, 0, 'p'}, {"next-ip", 1, 0, 'a'},
                                   {"bytes", 1, 0, 'b'}, {"iters", 1, 0, 'i'},     {"qps", 1, 0, 'q'},
                                   {"tclass", 1, 0, 't'}, {"timeout", 1, 0, 'u'},  {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (c) {
        case 'd': dev_name = optarg; break;
        case 'x': gid_index = atoi(optarg); break;
        case 'r': rank = atoi(optarg); break;
        case 'n': ranks = atoi(optarg); break;
        case 'p': port_base = atoi(optarg); break;
        case 'a': next_ip = optarg; break;
        case 'b': bytes = strtoull(optarg, NULL, 0); break;
        case 'i': iters = atoi(optarg); break;
        case 'q': qps = atoi(optarg); break;
        case 't': tclass = atoi(optarg); break;
        case 'u': timeout = atoi(optarg); break;
        default: fprintf(stderr, "bad option\n"); return 2;
        }
    }
    if (!dev_name || !next_ip || gid_index < 0 || rank < 0 || ranks < 2 || rank >= ranks || qps < 1 || qps > MAX_QPS ||
        iters < 1) {
        fprintf(stderr, "usage: %s --dev DEV --gid-index N --rank R --ranks N --next-ip IP [--port-base P] "
                        "[--bytes B] [--iters I] [--qps Q] [--tclass T] [--timeout EXP]\n", argv[0]);
        return 2;
    }
    /* Chunks of whole elements, split over the QPs. */
    uint64_t elems = bytes / 4, chunk_elems = (elems + ranks - 1) / ranks;
    uint64_t chunk = chunk_elems * 4;
    int steps = 2 * (ranks - 1);

    int ndev = 0;
    struct ibv_device **list = ibv_get_device_list(&ndev), *dev = NULL;
    for (int i = 0; list && i < ndev; i++)
        if (!strcmp(ibv_get_device_name(list[i]), dev_name)) dev = list[i];
    if (!dev) {
        fprintf(stderr, "fabric-verbs-allreduce: no RDMA device %s\n", dev_name);
        return 1;
    }
    struct ibv_context *ctx = ibv_open_device(dev);
    if (!ctx) die("ibv_open_device");
    struct ibv_port_attr port;
    if (ibv_query_port(ctx, 1, &port)) die("ibv_query_port");
    union ibv_gid gid;
    if (ibv_query_gid(ctx, 1, gid_index, &gid)) die("ibv_query_gid");
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    if (!pd) die("ibv_alloc_pd");
    uint32_t *data = aligned_alloc(4096, chunk * ranks + 4096);
    uint32_t *rbuf = aligned_alloc(4096, chunk * steps + 4096);
    if (!data || !rbuf) die("allocating buffers");
    memset(rbuf, 0, chunk * steps);
    struct ibv_mr *dmr = ibv_reg_mr(pd, data, chunk * ranks, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, chunk * steps, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!dmr || !rmr) die("ibv_reg_mr");
    struct ibv_cq *scq = ibv_create_cq(ctx, 4 * qps + 16, NULL, NULL, 0);
    struct ibv_cq *rcq = ibv_create_cq(ctx, qps * RECV_DEPTH + 16, NULL, NULL, 0);
    if (!scq || !rcq) die("ibv_create_cq");
    struct ibv_qp *tx[MAX_QPS], *rx[MAX_QPS];
    struct info mine_tx = {0}, mine_rx = {0}, prev_tx, next_rx;
    srand48(now_ns() ^ (uint64_t)rank);
    mine_tx.psn = (uint32_t)lrand48() & 0xffffff;
    mine_rx.psn = (uint32_t)lrand48() & 0xffffff;
    for (int i = 0; i < qps; i++) {
        struct ibv_qp_init_attr ia = {.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
                                      .cap = {.max_send_wr = 16, .max_recv_wr = RECV_DEPTH, .max_send_sge = 1,
                                              .max_recv_sge = 1}};
        tx[i] = ibv_create_qp(pd, &ia);
        rx[i] = ibv_create_qp(pd, &ia);
        if (!tx[i] || !rx[i]) die("ibv_create_qp");
        to_init(tx[i]);
        to_init(rx[i]);
        for (int k = 0; k < RECV_DEPTH; k++) post_recv(rx[i]);
        mine_tx.qpn[i] = tx[i]->qp_num;
        mine_rx.qpn[i] = rx[i]->qp_num;
    }
    memcpy(mine_tx.gid, gid.raw, 16);
    memcpy(mine_rx.gid, gid.raw, 16);
    mine_rx.addr = (uint64_t)(uintptr_t)rbuf;
    mine_rx.rkey = rmr->rkey;

    /* TCP: listen for the previous rank, connect to the next. */
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in la = {.sin_family = AF_INET, .sin_port = htons((uint16_t)(port_base + rank)),
                             .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (bind(lfd, (struct sockaddr *)&la, sizeof la) || listen(lfd, 1)) die("listening");
    int to_next = -1;
    struct sockaddr_in na = {.sin_family = AF_INET, .sin_port = htons((uint16_t)(port_base + (rank + 1) % ranks))};
    inet_pton(AF_INET, next_ip, &na.sin_addr);
    for (int tries = 0; to_next < 0; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&na, sizeof na) == 0) {
            to_next = fd;
        } else {
            close(fd);
            if (tries > 600) die("connecting to the next rank");
            usleep(100000);
        }
    }
    setsockopt(to_next, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    send_all(to_next, &mine_tx, sizeof mine_tx);
    int from_prev = accept(lfd, NULL, NULL);
    if (from_prev < 0) die("accept");
    setsockopt(from_prev, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    recv_all(from_prev, &prev_tx, sizeof prev_tx);
    enum ibv_mtu mtu = port.active_mtu;
    for (int i = 0; i < qps; i++)
        to_rts(rx[i], prev_tx.qpn[i], prev_tx.psn, prev_tx.gid, gid_index, tclass, mtu, mine_rx.psn, timeout);
    send_all(from_prev, &mine_rx, sizeof mine_rx);
    recv_all(to_next, &next_rx, sizeof next_rx);
    for (int i = 0; i < qps; i++)
        to_rts(tx[i], next_rx.qpn[i], mine_tx.psn, next_rx.gid, gid_index, tclass, mtu, mine_tx.psn, timeout);
    /* Everyone's receive side is ready before anyone writes. */
    barrier(rank, to_next, from_prev);

    uint64_t *iter_ns = calloc((size_t)iters, sizeof *iter_ns);
    uint64_t *step_ns = calloc((size_t)steps, sizeof *step_ns);
    uint64_t slice = (chunk / qps) & ~3ull;
    int verified = 1;
    for (int it = 0; it < iters; it++) {
        for (uint64_t e = 0; e < chunk_elems * ranks; e++) data[e] = (uint32_t)(rank + 1);
        barrier(rank, to_next, from_prev);
        uint64_t t0 = now_ns();
        for (int s = 0; s < steps; s++) {
            uint64_t ts = now_ns();
            int send_idx, recv_idx;
            if (s < ranks - 1) {
                send_idx = (rank - s + ranks) % ranks;
                recv_idx = (rank - s - 1 + 2 * ranks) % ranks;
            } else {
                int g = s - (ranks - 1);
                send_idx = (rank - g + 1 + ranks) % ranks;
                recv_idx = (rank - g + 2 * ranks) % ranks;
            }
            for (int i = 0; i < qps; i++) {
                uint64_t off = slice * (uint64_t)i, len = i == qps - 1 ? chunk - off : slice;
                struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)((char *)data + send_idx * chunk + off),
                                      .length = (uint32_t)len, .lkey = dmr->lkey};
                struct ibv_send_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1,
                                         .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
                                         .imm_data = htonl((uint32_t)s)},
                                   *bad;
                wr.wr.rdma.remote_addr = next_rx.addr + (uint64_t)s * chunk + off;
                wr.wr.rdma.rkey = next_rx.rkey;
                if (ibv_post_send(tx[i], &wr, &bad)) die("ibv_post_send");
            }
            wait_cq(scq, qps, "send");
            /* The previous rank's chunk: one immediate per QP. */
            for (int got = 0; got < qps;) {
                struct ibv_wc wc[16];
                int n = ibv_poll_cq(rcq, 16, wc);
                if (n < 0) die("ibv_poll_cq");
                if (n == 0) usleep(20);
                for (int k = 0; k < n; k++) {
                    if (wc[k].status != IBV_WC_SUCCESS) {
                        fprintf(stderr, "fabric-verbs-allreduce: receive failed: %s\n", ibv_wc_status_str(wc[k].status));
                        return 1;
                    }
                    for (int i = 0; i < qps; i++)
                        if (rx[i]->qp_num == wc[k].qp_num) post_recv(rx[i]);
                }
                got += n;
            }
            uint32_t *in = (uint32_t *)((char *)rbuf + (uint64_t)s * chunk), *out = data + recv_idx * chunk_elems;
            if (s < ranks - 1)
                for (uint64_t e = 0; e < chunk_elems; e++) out[e] += in[e];
            else
                memcpy(out, in, chunk);
            step_ns[s] = now_ns() - ts;
        }
        iter_ns[it] = now_ns() - t0;
    }
    uint32_t want = (uint32_t)(ranks * (ranks + 1) / 2);
    for (uint64_t e = 0; e < chunk_elems * ranks; e++)
        if (data[e] != want) verified = 0;
    barrier(rank, to_next, from_prev);

    printf("{\"rank\":%d,\"device\":\"%s\",\"chunk_bytes\":%llu,\"qps\":%d,\"mtu\":%d,\"verified\":%s,\"tx_qpns\":[", rank,
           dev_name, (unsigned long long)chunk, qps, 128 << mtu, verified ? "true" : "false");
    for (int i = 0; i < qps; i++) printf("%s%u", i ? "," : "", mine_tx.qpn[i]);
    printf("],\"next_rx_qpns\":[");
    for (int i = 0; i < qps; i++) printf("%s%u", i ? "," : "", next_rx.qpn[i]);
    printf("],\"iteration_ns\":[");
    for (int i = 0; i < iters; i++) printf("%s%llu", i ? "," : "", (unsigned long long)iter_ns[i]);
    printf("],\"step_ns\":[");
    for (int s = 0; s < steps; s++) printf("%s%llu", s ? "," : "", (unsigned long long)step_ns[s]);
    printf("]}\n");
    return verified ? 0 : 3;
}
