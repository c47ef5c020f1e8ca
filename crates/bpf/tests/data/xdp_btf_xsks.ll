; Test fixture: the built-in redirect program with `xsks_map' declared the libbpf/BTF way,
; in the `.maps' section (Sluice recognises it by its symbol name; no BTF is read). In C:
;
;   struct { __uint(type, BPF_MAP_TYPE_XSKMAP); ... } xsks_map SEC(".maps");
;   SEC("xdp") int xdp_redirect_all(struct xdp_md *ctx) {
;       return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
;   }
;
; Rebuild with ./build.sh.

target datalayout = "e-m:e-p:64:64-i64:64-i128:128-n32:64-S128"
target triple = "bpf"

%struct.xdp_md = type { i32, i32, i32, i32, i32, i32 }

@xsks_map = dso_local global [4 x ptr] zeroinitializer, section ".maps", align 8
@_license = dso_local global [4 x i8] c"GPL\00", section "license", align 1
@llvm.compiler.used = appending global [3 x ptr] [ptr @_license, ptr @xdp_redirect_all, ptr @xsks_map], section "llvm.metadata"

define dso_local i32 @xdp_redirect_all(ptr %ctx) #0 section "xdp" {
entry:
  %q_p = getelementptr inbounds %struct.xdp_md, ptr %ctx, i64 0, i32 4
  %q = load i32, ptr %q_p, align 4
  %r = call i64 inttoptr (i64 51 to ptr)(ptr @xsks_map, i32 %q, i64 2)
  %ret = trunc i64 %r to i32
  ret i32 %ret
}

attributes #0 = { nounwind }
