module goasm

go 1.19
