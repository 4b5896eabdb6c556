#!/usr/bin/env bash
# dynlibs.sh — the libraries opened on first use instead of linked (src/util/dynlib.h): FFmpeg's
# (MP4 / WebM audio, src/audio/av_lib.h), libcurl (serve --allow-media-hosts, run-batch;
# tools/server/curl_lib.h), libmicrohttpd (serve, run-batch; tools/server/mhd_lib.h) and libsndfile
# (every other audio file, mkmedia's tone; src/audio/sf_lib.h):
#  - the binary names none of them; a server that fetches no URL never loads libcurl, one that may
#    does; a command that serves nothing never loads libmicrohttpd, serve does; a text run never
#    loads libsndfile, a WAV's transcription does (transcribe.sh checks the same of FFmpeg's with a
#    WAV and a WebM);
#  - a library that cannot be opened, or one that lacks a function (stand-ins built here, found first
#    through LD_LIBRARY_PATH), is an error naming the feature, the library and what is missing, with a
#    non-zero exit (a 4xx JSON error from the server), and everything that does not need it still works.
set -u
source "$(dirname "$0")/common.bash"
M=$FIX/phi4mm-tiny/tiny_model
I=$FIX/phi4mm-tiny/inputs

if command -v readelf >/dev/null; then
  readelf -d "$BIN" 2>&1 | grep NEEDED | grep -Eo '\[[^]]*\]' >"$tmp/needed"
  if ! grep -q '^\[libc\.so' "$tmp/needed"; then fail dynlibs_not_linked "readelf lists no libc among the binary's libraries: $(head -c 200 "$tmp/needed")"
  elif grep -Eq 'libav|libcurl|libmicrohttpd|libsndfile' "$tmp/needed"; then
    fail dynlibs_not_linked "the binary names $(grep -E 'libav|libcurl|libmicrohttpd|libsndfile' "$tmp/needed" | tr '\n' ' ')"
  else pass dynlibs_not_linked; fi
else fail dynlibs_not_linked "needs readelf (binutils)"; fi

# serve stops at the missing model either way, after --allow-media-hosts has opened libcurl
LD_DEBUG=files "$BIN" serve -m "$tmp/no_model" --port 0 >/dev/null 2>"$tmp/ld_plain"
rc1=$?
LD_DEBUG=files "$BIN" serve -m "$tmp/no_model" --port 0 --allow-media-hosts 127.0.0.1 >/dev/null 2>"$tmp/ld_urls"
rc2=$?
if [ $rc1 -ne 0 ] && [ $rc2 -ne 0 ] && ! grep -q 'file=libcurl' "$tmp/ld_plain" \
   && grep -q 'file=libcurl\.so\.4 .*dynamically loaded' "$tmp/ld_urls" && grep -q 'no_model' "$tmp/ld_urls"; then
  pass dynlibs_curl_opened_on_use
else fail dynlibs_curl_opened_on_use "rc $rc1 $rc2; without URLs: $(grep -c 'file=libcurl' "$tmp/ld_plain") libcurl lines; with: $(grep -c 'file=libcurl' "$tmp/ld_urls")"; fi

# serve opens libmicrohttpd before the model (so the missing model is named after it); generating
# never opens it
LD_DEBUG=files "$BIN" generate -m "$M" -p hi -n 2 >/dev/null 2>"$tmp/ld_gen"
rc3=$?
if [ $rc3 -eq 0 ] && grep -q 'file=libopenblas' "$tmp/ld_gen" && ! grep -Eq 'file=(libmicrohttpd|libgnutls)' "$tmp/ld_gen" \
   && grep -q 'file=libmicrohttpd\.so\.12 .*dynamically loaded' "$tmp/ld_plain"; then
  pass dynlibs_mhd_opened_on_use
else fail dynlibs_mhd_opened_on_use "generate rc $rc3: $(grep -Ec 'file=(libmicrohttpd|libgnutls)' "$tmp/ld_gen") libmicrohttpd/GnuTLS lines; serve: $(grep -c 'file=libmicrohttpd' "$tmp/ld_plain")"; fi

# a text run never opens libsndfile (nor its codecs' libraries), a WAV's transcription does
LD_DEBUG=files "$BIN" transcribe -m "$M" -n 2 "$I/clip_a_16k.wav" >/dev/null 2>"$tmp/ld_wav"
rc4=$?
if [ $rc3 -eq 0 ] && ! grep -Eq 'file=(libsndfile|libFLAC|libvorbis|libmpg123)' "$tmp/ld_gen" \
   && [ $rc4 -eq 0 ] && grep -q 'file=libsndfile\.so\.1 .*dynamically loaded' "$tmp/ld_wav"; then
  pass dynlibs_sndfile_opened_on_use
else fail dynlibs_sndfile_opened_on_use "generate rc $rc3: $(grep -Ec 'file=(libsndfile|libFLAC|libvorbis|libmpg123)' "$tmp/ld_gen") lines; transcribe rc $rc4: $(grep -c 'file=libsndfile' "$tmp/ld_wav")"; fi

# Stand-ins: lacking/libX has the right soname and no functions; broken/libX needs a library that
# does not exist, so that it cannot be opened.
# libavformat: opened last, nothing else needs it (a stand-in libavutil would break libavcodec first)
avformat="libavformat.so.$(pkg-config --modversion libavformat 2>/dev/null | cut -d. -f1)"
mkdir -p "$tmp/lacking" "$tmp/broken" "$tmp/mhd_lacking" "$tmp/mhd_broken" "$tmp/sf_lacking" "$tmp/sf_broken"
echo 'int pm_stand_in;' >"$tmp/s.c"
ok=1
cc -shared -fPIC -o "$tmp/libpm_absent.so" -Wl,-soname,libpm_absent.so "$tmp/s.c" || ok=0
for so in libcurl.so.4 "$avformat"; do
  cc -shared -fPIC -o "$tmp/lacking/$so" -Wl,-soname,"$so" "$tmp/s.c" &&
    cc -shared -fPIC -o "$tmp/broken/$so" -Wl,-soname,"$so" "$tmp/s.c" -L"$tmp" -Wl,--no-as-needed -lpm_absent || ok=0
done
# apart from the others: the checks below that serve without FFmpeg need the real libmicrohttpd
cc -shared -fPIC -o "$tmp/mhd_lacking/libmicrohttpd.so.12" -Wl,-soname,libmicrohttpd.so.12 "$tmp/s.c" &&
  cc -shared -fPIC -o "$tmp/mhd_broken/libmicrohttpd.so.12" -Wl,-soname,libmicrohttpd.so.12 "$tmp/s.c" -L"$tmp" -Wl,--no-as-needed -lpm_absent || ok=0
cc -shared -fPIC -o "$tmp/sf_lacking/libsndfile.so.1" -Wl,-soname,libsndfile.so.1 "$tmp/s.c" &&
  cc -shared -fPIC -o "$tmp/sf_broken/libsndfile.so.1" -Wl,-soname,libsndfile.so.1 "$tmp/s.c" -L"$tmp" -Wl,--no-as-needed -lpm_absent || ok=0
rm -f "$tmp/libpm_absent.so"
if [ $ok = 0 ] || [ "$avformat" = libavformat.so. ]; then
  fail dynlibs_stand_ins "cannot build the stand-in libraries (cc, pkg-config libavformat)"
  exit 0
fi

# why_missing KIND SONAME FUNCTION: the regular expression of what the error says of a stand-in
why_missing() {
  local so=${2//./\\.}
  if [ "$1" = lacking ]; then echo "$so has no $3"; else echo "$so cannot be opened \\(libpm_absent\\.so"; fi
}

# with_libs DIR NAME ARGS...: `phi4mm ARGS` with DIR first on the library path; its output in
# $tmp/NAME.out and .err, its exit status in rc_NAME
with_libs() {
  local dir=$1 name=$2
  shift 2
  LD_LIBRARY_PATH=$dir "$BIN" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  printf -v "rc_$name" %d $?
}
out() { cat "$tmp/$1.out"; }
err() { head -c 300 "$tmp/$1.err"; }

ffmpeg -v error -y -i "$I/clip_a_16k.wav" -c:a libopus "$tmp/a.webm" 2>/dev/null
wav_ref=$("$BIN" transcribe -m "$M" -n 4 "$I/clip_a_16k.wav" 2>/dev/null)
webm_ref=$("$BIN" transcribe -m "$M" -n 4 "$tmp/a.webm" 2>/dev/null)
printf '%s\n' '{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}}' >"$tmp/batch.jsonl"
for kind in lacking broken; do
  curl_why=$(why_missing $kind libcurl.so.4 curl_global_init) av_why=$(why_missing $kind "$avformat" avformat_alloc_context)
  with_libs "$tmp/$kind" serve serve -m "$M" --port 0 --allow-media-hosts 127.0.0.1
  with_libs "$tmp/$kind" batch run-batch -m "$M" -i "$tmp/batch.jsonl" -o "$tmp/batch.jsonl.out"
  with_libs "$tmp/$kind" webm transcribe -m "$M" -n 4 "$tmp/a.webm"
  with_libs "$tmp/$kind" wav transcribe -m "$M" -n 4 "$I/clip_a_16k.wav"
  if [ $rc_serve -ne 0 ] && grep -Eq -- "--allow-media-hosts: libcurl is needed .*$curl_why" "$tmp/serve.err" \
     && [ $rc_batch -ne 0 ] && grep -Eq "libcurl is needed .*$curl_why" "$tmp/batch.err"; then
    pass "dynlibs_curl_$kind"
  else fail "dynlibs_curl_$kind" "serve rc $rc_serve: $(err serve); run-batch rc $rc_batch: $(err batch)"; fi
  if [ -f "$tmp/a.webm" ] && [ $rc_webm -ne 0 ] && grep -Eq "a\.webm.*need FFmpeg's libraries .*$av_why" "$tmp/webm.err" \
     && [ $rc_wav -eq 0 ] && [ -n "$wav_ref" ] && [ "$(out wav)" = "$wav_ref" ]; then
    pass "dynlibs_av_$kind"
  else fail "dynlibs_av_$kind" "webm rc $rc_webm: $(err webm); wav rc $rc_wav '$(out wav)' vs '$wav_ref' $(err wav)"; fi
done

# Without libmicrohttpd: serve and run-batch fail before loading the model, naming it; generating
# and transcribing do not need it
for kind in lacking broken; do
  mhd_why=$(why_missing $kind libmicrohttpd.so.12 MHD_start_daemon)
  with_libs "$tmp/mhd_$kind" serve serve -m "$M" --port 0
  with_libs "$tmp/mhd_$kind" batch run-batch -m "$M" -i "$tmp/batch.jsonl" -o "$tmp/batch.jsonl.out"
  with_libs "$tmp/mhd_$kind" wav transcribe -m "$M" -n 4 "$I/clip_a_16k.wav"
  with_libs "$tmp/mhd_$kind" gen generate -m "$M" -p hi -n 2
  if [ $rc_serve -ne 0 ] && grep -Eq "serve: error: libmicrohttpd is needed \(Debian: libmicrohttpd12\): $mhd_why" "$tmp/serve.err" \
     && ! grep -q 'model' "$tmp/serve.err" && [ $rc_batch -ne 0 ] && grep -Eq "libmicrohttpd is needed .*$mhd_why" "$tmp/batch.err" \
     && [ $rc_wav -eq 0 ] && [ -n "$wav_ref" ] && [ "$(out wav)" = "$wav_ref" ] && [ $rc_gen -eq 0 ] && [ -n "$(out gen)" ]; then
    pass "dynlibs_mhd_$kind"
  else fail "dynlibs_mhd_$kind" "serve rc $rc_serve: $(err serve); run-batch rc $rc_batch: $(err batch); wav rc $rc_wav '$(out wav)'; generate rc $rc_gen '$(out gen)'"; fi
done

# Without libsndfile: a WAV's transcription and mkmedia fail naming it, with a non-zero exit; a
# WebM (FFmpeg's) is still transcribed, a text still generated
for kind in lacking broken; do
  sf_why=$(why_missing $kind libsndfile.so.1 sf_open)
  with_libs "$tmp/sf_$kind" wav transcribe -m "$M" -n 4 "$I/clip_a_16k.wav"
  with_libs "$tmp/sf_$kind" mkmedia mkmedia --out "$tmp/media_$kind"
  with_libs "$tmp/sf_$kind" webm transcribe -m "$M" -n 4 "$tmp/a.webm"
  with_libs "$tmp/sf_$kind" gen generate -m "$M" -p hi -n 2
  if [ $rc_wav -ne 0 ] && grep -Eq "clip_a_16k\.wav: audio needs libsndfile \(Debian: libsndfile1\): $sf_why" "$tmp/wav.err" \
     && [ $rc_mkmedia -ne 0 ] && grep -Eq "tone\.wav: audio needs libsndfile .*$sf_why" "$tmp/mkmedia.err" \
     && [ $rc_webm -eq 0 ] && [ -n "$webm_ref" ] && [ "$(out webm)" = "$webm_ref" ] && [ $rc_gen -eq 0 ] && [ -n "$(out gen)" ]; then
    pass "dynlibs_sndfile_$kind"
  else fail "dynlibs_sndfile_$kind" "wav rc $rc_wav: $(err wav); mkmedia rc $rc_mkmedia: $(err mkmedia); webm rc $rc_webm '$(out webm)' vs '$webm_ref'; generate rc $rc_gen '$(out gen)'"; fi
done

# The server without FFmpeg's libraries: a WebM upload is a 4xx JSON error naming them, a WAV
# upload beside it is transcribed, and the server lives on
# (the stand-ins for the server alone: start_server's curl CLI needs the real libcurl)
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$tmp/lacking" "$BIN" >"$tmp/bin_lacking" && chmod +x "$tmp/bin_lacking"
real_bin=$BIN BIN=$tmp/bin_lacking
start_server -m "$M" --quiet
BIN=$real_bin
if [ -z "$port" ]; then fail dynlibs_av_served "the server did not start: $(tail -3 "$tmp/srv.log")"
else
  webm_code=$(curl -s -o "$tmp/webm.json" -w '%{http_code}' "http://127.0.0.1:$port/v1/audio/transcriptions" -F file=@"$tmp/a.webm" -F max_tokens=4)
  wav_code=$(curl -s -o "$tmp/wav.json" -w '%{http_code}' "http://127.0.0.1:$port/v1/audio/transcriptions" -F file=@"$I/clip_a_16k.wav" -F max_tokens=4)
  wav_text=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["text"])' "$tmp/wav.json" 2>/dev/null)
  if [ "${webm_code:0:1}" = 4 ] && $PY -c 'import json,sys; m=json.load(open(sys.argv[1]))["error"]["message"]; sys.exit(not ("FFmpeg" in m and sys.argv[2] in m))' "$tmp/webm.json" "$avformat" \
     && [ "$wav_code" = 200 ] && [ "$wav_text" = "$wav_ref" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null; then
    pass dynlibs_av_served
  else fail dynlibs_av_served "webm HTTP $webm_code $(head -c 300 "$tmp/webm.json"); wav HTTP $wav_code '$wav_text' vs '$wav_ref'"; fi
  stop_server
fi
