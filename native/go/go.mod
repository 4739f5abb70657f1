module gcbench/tok

go 1.19
