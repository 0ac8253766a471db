/*
 * modules.c - the images modules were loaded from (modules.h).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "modules.h"

#define ELF_MAX (1ull << 30)

struct loaded {
	void *module;
	struct triton_image image;
};

static struct {
	pthread_mutex_t lock;
	size_t n, cap;
	struct loaded *v;	/* grown as modules load; never shrunk */
} mods = { .lock = PTHREAD_MUTEX_INITIALIZER };

static uint64_t u64_at(const unsigned char *b, unsigned off)
{
	uint64_t v;

	memcpy(&v, b + off, sizeof v);
	return v;
}

static unsigned u16_at(const unsigned char *b, unsigned off)
{
	uint16_t v;

	memcpy(&v, b + off, sizeof v);
	return v;
}

uint64_t modules_elf_size(const void *image)
{
	const unsigned char *h = image;
	uint64_t end = 64;
	unsigned sh, ph;

	/* 64-bit, little-endian: a cubin.  The driver has read the image
	 * whole (the load succeeded), so its headers say where it ends; a
	 * table counted 0 says nothing (its offset may be stray).  Nothing
	 * past the magic is read before it matches: a PTX or fatbin image may
	 * be shorter than an ELF header. */
	if (memcmp(h, "\177ELF", 4) || h[4] != 2 || h[5] != 1)
		return 0;
	sh = u16_at(h, 0x3c);
	ph = u16_at(h, 0x38);
	if (sh) {
		if (u64_at(h, 0x28) > ELF_MAX)
			return 0;
		end = u64_at(h, 0x28) + (uint64_t)u16_at(h, 0x3a) * sh;
	}
	if (ph) {
		uint64_t pend;

		if (u64_at(h, 0x20) > ELF_MAX)
			return 0;
		pend = u64_at(h, 0x20) + (uint64_t)u16_at(h, 0x36) * ph;
		end = pend > end ? pend : end;
	}
	return end > ELF_MAX ? 0 : end;
}

/* Index of module in the table, or n.  Under the lock. */
static size_t find(void *module)
{
	size_t i;

	for (i = 0; i < mods.n && mods.v[i].module != module; i++)
		;
	return i;
}

void modules_event(void *module, const void *image)
{
	struct triton_image img = { 0 };
	size_t i;

	if (!module)
		return;
	if (image && (img.size = modules_elf_size(image)))
		img.crc = crc32c(0, image, img.size);
	pthread_mutex_lock(&mods.lock);
	if ((i = find(module)) < mods.n)	/* unloaded, or a handle used again */
		mods.v[i] = mods.v[--mods.n];
	if (img.size && mods.n == mods.cap) {
		size_t cap = mods.cap ? 2 * mods.cap : 256;
		struct loaded *v = realloc(mods.v, cap * sizeof *v);

		if (v) {
			mods.v = v;
			mods.cap = cap;
		}
	}
	if (img.size && mods.n < mods.cap)	/* without memory: not known */
		mods.v[mods.n++] = (struct loaded){ module, img };
	pthread_mutex_unlock(&mods.lock);
}

int modules_image(void *module, struct triton_image *out)
{
	size_t i;
	int r = -1;

	pthread_mutex_lock(&mods.lock);
	if (module && (i = find(module)) < mods.n) {
		*out = mods.v[i].image;
		r = 0;
	}
	pthread_mutex_unlock(&mods.lock);
	return r;
}
