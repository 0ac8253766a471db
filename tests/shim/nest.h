/*
 * nest.h - what nest.c allocates: NEST_ALLOCS - 1 cudaMalloc and one
 * cudaMallocAsync, each freed.
 */
#ifndef MOEFT_NEST_H
#define MOEFT_NEST_H

#define NEST_ALLOCS 4

#endif
