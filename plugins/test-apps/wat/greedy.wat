;; greedy: four memories and a table, grown at a call (memory_mb bounds them together).
;; A core module in WebAssembly text, made a component for wit/datanotes-app.wit by
;; scripts/build-plugins (jco parse, embed, new). Static answers live in memory 0; call-tool
;; dispatches on the length of the tool's name.
(module
  (memory (export "memory") 1)
  (memory $m1 0)
  (memory $m2 0)
  (memory $m3 0)
  (table $t 1 funcref)
  (global $heap (mut i32) (i32.const 8192))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32)
    ;; align up
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
                           (i32.sub (i32.const 0) (local.get 2))))
    (global.set $heap (i32.add (local.get $p) (local.get 3)))
    (if (i32.gt_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536)))
      (then (drop (memory.grow (i32.add (i32.shr_u (i32.sub (global.get $heap)
                  (i32.mul (memory.size) (i32.const 65536))) (i32.const 16)) (i32.const 1))))))
    (local.get $p))
  ;; list-tools: the list (pointer, length) at 1024, the records at 4096.
  (func (export "datanotes:app/tools@0.1.0#list-tools") (result i32)
    (i32.const 1024))
  (func (export "datanotes:app/tools@0.1.0#instructions") (result i32)
    (i32.const 1040))
  (func $answer (param $ptr i32) (param $len i32) (param $err i32) (result i32)
    (i32.store8 (i32.const 1056) (local.get $err))
    (i32.store (i32.const 1060) (local.get $ptr))
    (i32.store (i32.const 1064) (local.get $len))
    ;; the arguments the host passed are no longer needed
    (global.set $heap (i32.const 8192))
    (i32.const 1056))
  (func $grow_memories (local $i i32) (local $old i32) (local $a i32)
    (loop $round
      (local.set $old (memory.grow $m1 (i32.const 16)))
      (if (i32.ne (local.get $old) (i32.const -1)) (then
        (local.set $a (i32.mul (local.get $old) (i32.const 65536)))
        (loop $touch1
          (i32.store8 $m1 (local.get $a) (i32.const 1))
          (local.set $a (i32.add (local.get $a) (i32.const 4096)))
          (br_if $touch1 (i32.lt_u (local.get $a) (i32.mul (i32.add (local.get $old) (i32.const 16)) (i32.const 65536)))))))
      (local.set $old (memory.grow $m2 (i32.const 16)))
      (if (i32.ne (local.get $old) (i32.const -1)) (then
        (local.set $a (i32.mul (local.get $old) (i32.const 65536)))
        (loop $touch2
          (i32.store8 $m2 (local.get $a) (i32.const 1))
          (local.set $a (i32.add (local.get $a) (i32.const 4096)))
          (br_if $touch2 (i32.lt_u (local.get $a) (i32.mul (i32.add (local.get $old) (i32.const 16)) (i32.const 65536)))))))
      (local.set $old (memory.grow $m3 (i32.const 16)))
      (if (i32.ne (local.get $old) (i32.const -1)) (then
        (local.set $a (i32.mul (local.get $old) (i32.const 65536)))
        (loop $touch3
          (i32.store8 $m3 (local.get $a) (i32.const 1))
          (local.set $a (i32.add (local.get $a) (i32.const 4096)))
          (br_if $touch3 (i32.lt_u (local.get $a) (i32.mul (i32.add (local.get $old) (i32.const 16)) (i32.const 65536)))))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $round (i32.lt_u (local.get $i) (i32.const 256)))))
  ;; grows the table by 1M elements at a time, up to 64M (512 MiB of funcrefs)
  (func $grow_table (local $i i32)
    (loop $more
      (if (i32.ne (table.grow $t (ref.null func) (i32.const 1048576)) (i32.const -1))
        (then
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $more (i32.lt_u (local.get $i) (i32.const 64)))))))
  (func (export "datanotes:app/tools@0.1.0#call-tool")
    (param $name i32) (param $name_len i32) (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32)
    (result i32)
    (if (i32.eq (local.get $name_len) (i32.const 9)) (then (return (call $answer (i32.const 556) (i32.const 12) (i32.const 0)))))
    (if (i32.eq (local.get $name_len) (i32.const 15)) (then (call $grow_memories) (return (call $answer (i32.const 568) (i32.const 14) (i32.const 0)))))
    (if (i32.eq (local.get $name_len) (i32.const 12)) (then (call $grow_table) (return (call $answer (i32.const 568) (i32.const 14) (i32.const 0)))))
    (call $answer (i32.const 582) (i32.const 12) (i32.const 1)))
  (data (i32.const 1024) "\00\10\00\00\03\00\00\00")
  (data (i32.const 1040) "\dd\01\00\00\4f\00\00\00")
  (data (i32.const 256) "\67\72\65\65\64\79\5f\6f\6b\41\6e\73\77\65\72\73\20\61\74\20\6f\6e\63\65\2e\7b\22\74\79\70\65\22\3a\20\22\6f\62\6a\65\63\74\22\2c\20\22\70\72\6f\70\65\72\74\69\65\73\22\3a\20\7b\7d\7d\67\72\65\65\64\79\5f\6d\65\6d\6f\72\69\65\73\47\72\6f\77\73\20\69\74\73\20\74\68\72\65\65\20\65\78\74\72\61\20\6d\65\6d\6f\72\69\65\73\2c\20\31\20\4d\69\42\20\65\61\63\68\20\69\6e\20\74\75\72\6e\2c\20\75\70\20\74\6f\20\32\35\36\20\4d\69\42\20\65\61\63\68\2e\67\72\65\65\64\79\5f\74\61\62\6c\65\47\72\6f\77\73\20\69\74\73\20\74\61\62\6c\65\20\62\79\20\31\4d\20\65\6c\65\6d\65\6e\74\73\20\61\74\20\61\20\74\69\6d\65\2c\20\75\70\20\74\6f\20\36\34\4d\20\28\35\31\32\20\4d\69\42\29\2e\67\72\65\65\64\79\20\69\73\20\61\20\74\65\73\74\20\61\70\70\20\74\68\61\74\20\6d\69\73\62\65\68\61\76\65\73\20\6f\6e\20\70\75\72\70\6f\73\65\3b\20\6e\65\76\65\72\20\69\6e\73\74\61\6c\6c\20\69\74\20\66\6f\72\20\72\65\61\6c\20\75\73\65\2e\7b\22\6f\6b\22\3a\20\74\72\75\65\7d\7b\22\67\72\65\77\22\3a\20\74\72\75\65\7d\6e\6f\20\73\75\63\68\20\74\6f\6f\6c")
  (data (i32.const 4096) "\00\01\00\00\09\00\00\00\09\01\00\00\10\00\00\00\19\01\00\00\24\00\00\00\00\00\00\00\00\00\00\00\3d\01\00\00\0f\00\00\00\4c\01\00\00\47\00\00\00\19\01\00\00\24\00\00\00\00\00\00\00\00\00\00\00\93\01\00\00\0c\00\00\00\9f\01\00\00\3e\00\00\00\19\01\00\00\24\00\00\00\00\00\00\00\00\00\00\00"))
