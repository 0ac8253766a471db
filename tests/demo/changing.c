/*
 * changing.c - a command that speaks moeft demo's protocol (--steps=N,
 * --journal=PATH: a line "step T 1" per step, 5 ms apart) but prints its
 * process id, so that no two runs print the same: a restored run's output
 * differs.  The first --steps counts, so that 'changing --steps=0' ends
 * at once whatever moeft demo adds.  C, not a script, so that the
 * sanitizer build's preload can be loaded into it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const struct timespec step = { 0, 5000000 };
	const char *journal = NULL;
	unsigned long steps = 0;
	int steps_given = 0;

	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--steps=", 8) && !steps_given++)
			steps = strtoul(argv[i] + 8, NULL, 10);
		else if (!strncmp(argv[i], "--journal=", 10))
			journal = argv[i] + 10;
	}
	for (unsigned long t = 0; t < steps; t++) {
		FILE *j;

		nanosleep(&step, NULL);
		if (journal && (!(j = fopen(journal, "a")) || fprintf(j, "step %lu 1\n", t) < 0 ||
				fclose(j))) {
			perror(journal);
			return 1;
		}
	}
	printf("pid %ld\n", (long)getpid());
	return 0;
}
