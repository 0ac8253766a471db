/*
 * api.c - include/moeft.h, the public C API, over the preload.
 */
#include "moeft.h"
#include "shim.h"

int moeft_api_version(void)
{
	return MOEFT_API_VERSION;
}

const char *moeft_version(void)
{
	return MOEFT_RELEASE;
}

int moeft_instrumenting(void)
{
	return shim_interposing() && shim_events_on();
}
