; Test fixture for `create interface af_xdp ... prog <file>` (Sluice's ELF loader).
; Hand-written LLVM IR because the build machines have llc but no clang. In C it reads:
;
;   struct bpf_map_def SEC("maps") xsks_map = { BPF_MAP_TYPE_XSKMAP, 4, 4, 64, 0 };
;   struct bpf_map_def SEC("maps") icmp_drops = { BPF_MAP_TYPE_ARRAY, 4, 8, 1, 0 };
;   SEC("xdp") int xdp_drop_icmp(struct xdp_md *ctx) {
;       void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
;       if (data + 34 <= end && *(__u16 *)(data + 12) == htons(ETH_P_IP)
;           && *(__u8 *)(data + 23) == IPPROTO_ICMP)
;       {
;           __u32 zero = 0;
;           __u64 *n = bpf_map_lookup_elem(&icmp_drops, &zero);
;           if (n)
;               __sync_fetch_and_add(n, 1);
;           return XDP_DROP;
;       }
;       return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
;   }
;   char _license[] SEC("license") = "GPL";
;
; Rebuild the committed object with ./build.sh (llc -march=bpf -filetype=obj).

target datalayout = "e-m:e-p:64:64-i64:64-i128:128-n32:64-S128"
target triple = "bpf"

%struct.bpf_map_def = type { i32, i32, i32, i32, i32 }
%struct.xdp_md = type { i32, i32, i32, i32, i32, i32 }

@xsks_map = dso_local global %struct.bpf_map_def { i32 17, i32 4, i32 4, i32 64, i32 0 }, section "maps", align 4
@icmp_drops = dso_local global %struct.bpf_map_def { i32 2, i32 4, i32 8, i32 1, i32 0 }, section "maps", align 4
@_license = dso_local global [4 x i8] c"GPL\00", section "license", align 1
@llvm.compiler.used = appending global [4 x ptr] [ptr @_license, ptr @xdp_drop_icmp, ptr @xsks_map, ptr @icmp_drops], section "llvm.metadata"

define dso_local i32 @xdp_drop_icmp(ptr %ctx) #0 section "xdp" {
entry:
  %zero = alloca i32, align 4
  %data32 = load i32, ptr %ctx, align 4
  %end_p = getelementptr inbounds %struct.xdp_md, ptr %ctx, i64 0, i32 1
  %end32 = load i32, ptr %end_p, align 4
  %data = inttoptr i32 %data32 to ptr
  %end = inttoptr i32 %end32 to ptr
  %hdr_end = getelementptr inbounds i8, ptr %data, i64 34
  %short = icmp ugt ptr %hdr_end, %end
  br i1 %short, label %redirect, label %ether

ether:
  %type_p = getelementptr inbounds i8, ptr %data, i64 12
  %type = load i16, ptr %type_p, align 1
  ; 0x0800 in network byte order, read little endian
  %is_ip4 = icmp eq i16 %type, 8
  br i1 %is_ip4, label %proto, label %redirect

proto:
  %proto_p = getelementptr inbounds i8, ptr %data, i64 23
  %p = load i8, ptr %proto_p, align 1
  %is_icmp = icmp eq i8 %p, 1
  br i1 %is_icmp, label %drop, label %redirect

drop:
  store i32 0, ptr %zero, align 4
  ; bpf_map_lookup_elem (helper 1)
  %n = call ptr inttoptr (i64 1 to ptr)(ptr @icmp_drops, ptr %zero)
  %found = icmp ne ptr %n, null
  br i1 %found, label %count, label %dropped

count:
  %old = atomicrmw add ptr %n, i64 1 seq_cst
  br label %dropped

dropped:
  ret i32 1

redirect:
  %q_p = getelementptr inbounds %struct.xdp_md, ptr %ctx, i64 0, i32 4
  %q = load i32, ptr %q_p, align 4
  ; bpf_redirect_map (helper 51)
  %r = call i64 inttoptr (i64 51 to ptr)(ptr @xsks_map, i32 %q, i64 2)
  %ret = trunc i64 %r to i32
  ret i32 %ret
}

attributes #0 = { nounwind }
