/* CUDA buffers and streams in the core. Without RINGLET_CUDA (or without a device)
 * every pointer is host memory and a stream is an error.
 *
 * Stream order (as NCCL's calls): the calling thread records an event on the stream
 * (what came before the call) and enqueues a kernel that holds the stream until a
 * host-mapped flag reaches the operation's sequence number (what comes after). The
 * progress thread waits for the event, runs the operation, and sets the flag. So the
 * call returns at once and no host synchronisation is needed on the user's side. */
#ifndef RINGLET_DEVICE_H
#define RINGLET_DEVICE_H

#include "comm.h"

/* A CUDA device is usable here. */
int rl_dev_present(void);
/* -1: host memory (or no CUDA); else the CUDA device that owns p. */
int rl_dev_of_ptr(const void *p);
/* Calling thread: makes the request wait for the stream's earlier work and the stream
 * wait for the request. */
ringlet_result_t rl_dev_enqueue(struct ringlet_comm *c, struct ringlet_request *r, char *err);
/* Progress thread: runs a request on device buffers (staged through pinned host
 * memory) and releases its stream, whatever the outcome. */
ringlet_result_t rl_dev_run(struct ringlet_comm *c, struct ringlet_request *r, char *err);
/* Lets the request's stream go on (an operation that failed before running). */
void rl_dev_release(struct ringlet_comm *c, struct ringlet_request *r);
/* Frees the communicator's CUDA resources. */
void rl_dev_comm_fini(struct ringlet_comm *c);

#endif
