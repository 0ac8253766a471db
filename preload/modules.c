/*
 * modules.c - the images modules were loaded from (modules.h).
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "crc32c.h"
#include "modules.h"

#define MODULES_MAX 4096
#define ELF_MAX (1ull << 30)

static struct {
	pthread_mutex_t lock;
	unsigned n;
	struct {
		void *module;
		struct triton_image image;
	} v[MODULES_MAX];
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
	uint64_t sh, ph;

	/* 64-bit, little-endian: a cubin.  The driver has read the image
	 * whole (the load succeeded), so its headers say where it ends. */
	if (memcmp(h, "\177ELF", 4) || h[4] != 2 || h[5] != 1)
		return 0;
	sh = u64_at(h, 0x28);
	ph = u64_at(h, 0x20);
	if (sh > ELF_MAX || ph > ELF_MAX)
		return 0;
	sh += (uint64_t)u16_at(h, 0x3a) * u16_at(h, 0x3c);
	ph += (uint64_t)u16_at(h, 0x36) * u16_at(h, 0x38);
	sh = sh > ph ? sh : ph;
	return sh < 64 || sh > ELF_MAX ? 0 : sh;
}

/* Index of module in the table, or n.  Under the lock. */
static unsigned find(void *module)
{
	unsigned i;

	for (i = 0; i < mods.n && mods.v[i].module != module; i++)
		;
	return i;
}

void modules_event(void *module, const void *image)
{
	struct triton_image img = { 0 };
	unsigned i;

	if (!module)
		return;
	if (image && (img.size = modules_elf_size(image)))
		img.crc = crc32c(0, image, img.size);
	pthread_mutex_lock(&mods.lock);
	i = find(module);
	if (i < mods.n) {	/* unloaded, or a handle used again: forget it */
		mods.v[i] = mods.v[--mods.n];
		i = mods.n;
	}
	if (img.size && i < MODULES_MAX) {
		mods.v[i].module = module;
		mods.v[i].image = img;
		mods.n++;
	}
	pthread_mutex_unlock(&mods.lock);
}

int modules_image(void *module, struct triton_image *out)
{
	unsigned i;
	int r = -1;

	pthread_mutex_lock(&mods.lock);
	if (module && (i = find(module)) < mods.n) {
		*out = mods.v[i].image;
		r = 0;
	}
	pthread_mutex_unlock(&mods.lock);
	return r;
}
