/*
 * modules.h - the images of the modules the program loads from memory
 * (cuModuleLoadData, cuModuleLoadDataEx): the size and CRC-32C of each
 * ELF image (a cubin), by module handle.
 *
 * Triton loads each compiled kernel's cubin this way, the one it keeps in
 * its cache beside the kernel's IR.  A kernel whose module is known is
 * tied to the cache entry holding that very cubin (triton.h), so a
 * sibling entry with an equal parameter table is never taken for it.
 * Module loads are rare (once per compiled kernel): a mutex guards the
 * table, which grows as they come; nothing here runs on the launch path.
 * A module that goes away without cuModuleUnload (its context destroyed)
 * stays listed until its handle is loaded again.
 */
#ifndef MOEFT_MODULES_H
#define MOEFT_MODULES_H

#include "triton.h"

/* The shim's event: image loaded as module, or (image NULL) module about
 * to be unloaded. */
void modules_event(void *module, const void *image);

/* What module was loaded from: 0, or -1 when not known (not loaded from an
 * ELF image in memory, unloaded, or no memory to keep it). */
int modules_image(void *module, struct triton_image *out);

/* The size of the ELF image at image (its headers' extent: section and
 * program header tables end a cubin; a table of no entries is not
 * counted), or 0 when it is no 64-bit ELF or claims more than 1 GiB. */
uint64_t modules_elf_size(const void *image);

#endif
