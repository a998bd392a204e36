module github.com/unitlease/unitlease

go 1.26
