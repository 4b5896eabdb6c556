/* test_weights_pages.c — how the loader treats the page cache behind its mappings: after
 * pm_weights_unmap_resident every tensor still reads its bytes (they fault back in from the page
 * cache) and the mapping's resident pages are gone; pm_file_recache reads a whole file (evicting
 * it first or not), reports its size and at most that much in 2 MB pages, and names a missing
 * or empty file; pm_alloc_huge gives 2 MB-aligned memory of any size. The file here is 6 MB plus
 * a tail, so that it spans whole 2 MB pages wherever the filesystem can cache it in them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/safetensors.h"

enum { N = 3 * 1024 * 1024 + 77 }; /* bf16 elements: 6 MB and a tail */

static char dir[64], path[128];

/* A lone model.safetensors with one BF16 tensor "w" [N] whose element i is i * 7 mod 65521. */
static int write_shard(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/pm-pages-XXXXXX");
    if (!mkdtemp(dir)) return -1;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    char hdr[128];
    int hl = snprintf(hdr, sizeof hdr, "{\"w\":{\"dtype\":\"BF16\",\"shape\":[%d],\"data_offsets\":[0,%d]}}", N, 2 * N);
    while (hl % 8) hdr[hl++] = ' ';
    uint64_t len = (uint64_t)hl;
    uint16_t *d = malloc(sizeof(uint16_t) * N);
    if (!d) return -1;
    for (int i = 0; i < N; i++) d[i] = (uint16_t)((uint64_t)i * 7 % 65521);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(&len, 8, 1, f) == 1 && fwrite(hdr, 1, (size_t)hl, f) == (size_t)hl && fwrite(d, 2, N, f) == N;
    if (f) fclose(f);
    free(d);
    return ok ? 0 : -1;
}

static int remove_shard(void **state) {
    (void)state;
    unlink(path);
    rmdir(dir);
    return 0;
}

/* Pages of [p, p + len) mapped in this process (mincore reports the page cache; /proc/self/pagemap
 * needs no privilege for the present bit). */
static size_t present_pages(const void *p, size_t len) {
    FILE *f = fopen("/proc/self/pagemap", "rb");
    if (!f) return 0;
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(pg - 1), end = (uintptr_t)p + len;
    size_t n = 0;
    for (; a < end; a += (uintptr_t)pg) {
        uint64_t e = 0;
        if (fseek(f, (long)(a / (uintptr_t)pg * 8), SEEK_SET) || fread(&e, 8, 1, f) != 1) break;
        n += (e >> 63) & 1;
    }
    fclose(f);
    return n;
}

static void test_unmap_keeps_contents(void **state) {
    (void)state;
    pm_weights *w = NULL;
    pm_err e = {0};
    assert_int_equal(pm_weights_open(&w, dir, &e), PM_OK);
    const pm_tensor *t = pm_wget(w, &e, 1, (int64_t[]){N}, "w");
    assert_non_null(t);
    const uint16_t *d = t->data;
    uint64_t sum = 0;
    for (int i = 0; i < N; i++) sum += d[i];
    assert_true(present_pages(d, t->nbytes) > 0);
    pm_weights_unmap_resident(w);
    assert_int_equal(present_pages(d, t->nbytes), 0);
    uint64_t again = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(d[i], (uint16_t)((uint64_t)i * 7 % 65521));
        again += d[i];
    }
    assert_true(sum == again);
    assert_true(present_pages(d, t->nbytes) > 0);
    pm_weights_close(w);
}

static void test_recache(void **state) {
    (void)state;
    pm_err e = {0};
    for (int evict = 0; evict < 2; evict++) {
        size_t bytes = 1, huge = 1;
        assert_int_equal(pm_file_recache(path, evict, &bytes, &huge, &e), PM_OK);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        assert_int_equal(bytes, (size_t)ftell(f));
        fclose(f);
        assert_true(huge <= bytes);
        assert_int_equal(huge % ((size_t)2 << 20), 0);
    }
    /* the shard still opens and reads the same after eviction */
    pm_weights *w = NULL;
    assert_int_equal(pm_weights_open(&w, dir, &e), PM_OK);
    const uint16_t *d = pm_weights_find(w, "w")->data;
    assert_int_equal(d[N - 1], (uint16_t)((uint64_t)(N - 1) * 7 % 65521));
    pm_weights_close(w);
    char missing[160];
    snprintf(missing, sizeof missing, "%s/nope.safetensors", dir);
    size_t bytes = 1, huge = 1;
    assert_int_equal(pm_file_recache(missing, 1, &bytes, &huge, &e), PM_EIO);
    assert_non_null(strstr(e.msg, "nope.safetensors"));
    assert_true(bytes == 0 && huge == 0);
    snprintf(missing, sizeof missing, "%s/empty.safetensors", dir);
    FILE *f = fopen(missing, "wb");
    assert_non_null(f);
    fclose(f);
    e = (pm_err){0};
    assert_int_equal(pm_file_recache(missing, 0, &bytes, &huge, &e), PM_EIO);
    unlink(missing);
    assert_non_null(strstr(e.msg, "empty.safetensors: file is empty"));
}

/* pm_alloc_huge: 2 MB-aligned, every byte of n writable and readable back, for sizes below,
 * at and past a 2 MB multiple. */
static void test_alloc_huge(void **state) {
    (void)state;
    size_t sizes[] = {1, 4096, (size_t)2 << 20, ((size_t)5 << 20) + 13};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        uint8_t *p = pm_alloc_huge(sizes[k]);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % ((uintptr_t)2 << 20), 0);
        for (size_t i = 0; i < sizes[k]; i++) p[i] = (uint8_t)(i * 31);
        for (size_t i = 0; i < sizes[k]; i += 4093) assert_int_equal(p[i], (uint8_t)(i * 31));
        assert_int_equal(p[sizes[k] - 1], (uint8_t)((sizes[k] - 1) * 31));
        free(p);
    }
    assert_null(pm_alloc_huge(SIZE_MAX - 5));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unmap_keeps_contents),
        cmocka_unit_test(test_recache),
        cmocka_unit_test(test_alloc_huge),
    };
    return cmocka_run_group_tests(tests, write_shard, remove_shard);
}
